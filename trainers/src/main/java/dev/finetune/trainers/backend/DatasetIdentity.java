package dev.finetune.trainers.backend;

import dev.finetune.recipes.DatasetSource;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.hub.DatasetFiles;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.DigestInputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.List;

/**
 * A fingerprint of the training data for the checkpoint's resume keys: each dataset's type, field and file
 * contents. Edited rows change it, so a resume never continues a data order computed for other data.
 */
public final class DatasetIdentity {
    private DatasetIdentity() {}

    public static String of(List<DatasetSpec> datasets) {
        MessageDigest digest = sha256();
        for (DatasetSpec spec : datasets) {
            update(digest, (spec.type() == null ? null : spec.type().key()) + "\u0000" + spec.field() + "\u0000" + spec.fieldMessages() + "\u0000");
            if (!spec.source().equals(DatasetSource.DEFAULT) || !spec.local()) {
                // which rows of a repo or folder were read (older local-file identities stay as they were)
                update(digest, spec.remote() + "\u0000" + spec.source() + "\u0000" + spec.split() + "\u0000");
            }
            for (Path file : DatasetFiles.of(spec).files().stream().map(DatasetFiles.DataFile::path).toList()) {
                update(digest, file.getFileName() + "\u0000");
                try (InputStream in = new DigestInputStream(Files.newInputStream(file), digest)) {
                    in.transferTo(java.io.OutputStream.nullOutputStream());
                } catch (IOException e) {
                    throw new UserError(file.toString(), "cannot read the dataset: " + e.getMessage(), "check the file");
                }
            }
        }
        return "sha256:" + HexFormat.of().formatHex(digest.digest());
    }

    private static void update(MessageDigest digest, String text) {
        digest.update(text.getBytes(StandardCharsets.UTF_8));
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
    }
}
