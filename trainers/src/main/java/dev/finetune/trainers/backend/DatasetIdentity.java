package dev.finetune.trainers.backend;

import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.UserError;
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
import java.util.stream.Stream;

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
            for (Path file : files(spec.path())) {
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

    private static List<Path> files(Path path) {
        if (!Files.isDirectory(path)) {
            return List.of(path);
        }
        try (Stream<Path> listing = Files.list(path)) {
            return listing.filter(Files::isRegularFile).sorted().toList();
        } catch (IOException e) {
            throw new UserError(path.toString(), "cannot list the dataset folder: " + e.getMessage(), "check the folder");
        }
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
