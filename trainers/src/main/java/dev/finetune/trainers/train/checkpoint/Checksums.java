package dev.finetune.trainers.train.checkpoint;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

/**
 * A folder's manifest of SHA-256 sums, one {@code <hex>  <name>} line per regular file (the format
 * {@code sha256sum -c} reads). It covers every file present when written, so a layout that adds files keeps
 * being verified without changes here.
 */
public final class Checksums {
    private static final int MAX_MANIFEST_BYTES = 1 << 20;

    private Checksums() {}

    /** Writes {@code manifest} in {@code folder} over every other regular file there. */
    static void write(Path folder, String manifest) throws IOException {
        StringBuilder lines = new StringBuilder();
        List<Path> files;
        try (Stream<Path> listing = Files.list(folder)) {
            files = listing.filter(Files::isRegularFile).filter(p -> !p.getFileName().toString().equals(manifest))
                    .sorted().toList();
        }
        for (Path file : files) {
            lines.append(sha256(file)).append("  ").append(file.getFileName()).append('\n');
        }
        Files.writeString(folder.resolve(manifest), lines.toString(), StandardCharsets.UTF_8);
    }

    /**
     * Throws {@link CheckpointStore.Damaged} unless the manifest exists, names every file of {@code required},
     * and every file it names has its recorded sum.
     */
    static void verify(Path folder, String manifest, List<String> required) {
        Map<String, String> sums = read(folder, manifest);
        for (String name : required) {
            if (!sums.containsKey(name)) {
                throw new CheckpointStore.Damaged(folder, manifest + " does not cover " + name);
            }
        }
        for (Map.Entry<String, String> entry : sums.entrySet()) {
            Path file = folder.resolve(entry.getKey());
            if (!Files.isRegularFile(file)) {
                throw new CheckpointStore.Damaged(folder, entry.getKey() + " is missing");
            }
            String actual;
            try {
                actual = sha256(file);
            } catch (IOException e) {
                throw new CheckpointStore.Damaged(folder, entry.getKey() + " is unreadable (" + e.getMessage() + ")");
            }
            if (!actual.equals(entry.getValue())) {
                throw new CheckpointStore.Damaged(folder, entry.getKey() + " does not match its checksum (its bytes "
                        + "changed after it was saved)");
            }
        }
    }

    private static Map<String, String> read(Path folder, String manifest) {
        Path file = folder.resolve(manifest);
        List<String> lines;
        try {
            if (!Files.isRegularFile(file)) {
                throw new Unverified(folder, manifest);
            }
            if (Files.size(file) > MAX_MANIFEST_BYTES) {
                throw new CheckpointStore.Damaged(folder, manifest + " is too large to be a manifest");
            }
            lines = Files.readAllLines(file, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new CheckpointStore.Damaged(folder, manifest + " is unreadable (" + e.getMessage() + ")");
        }
        Map<String, String> sums = new LinkedHashMap<>();
        List<String> bad = new ArrayList<>();
        for (String line : lines) {
            if (line.isBlank()) {
                continue;
            }
            // names are our own plain file names: no folders, nothing that could point outside the checkpoint
            if (!line.matches("[0-9a-f]{64}  [A-Za-z0-9._-]+") || line.substring(66).startsWith(".")) {
                bad.add(line);
                continue;
            }
            sums.put(line.substring(66), line.substring(0, 64));
        }
        if (!bad.isEmpty()) {
            throw new CheckpointStore.Damaged(folder, manifest + " has a malformed line");
        }
        return sums;
    }

    /**
     * A checkpoint without its manifest (#26): nothing shows its files are the ones saved, so it is refused, never
     * passed over for an older one (the run would then save over it) and never used unchecked. The user who trusts
     * it accepts it explicitly, by writing the manifest the hint gives; it then resumes like any other.
     */
    public static final class Unverified extends dev.finetune.recipes.UserError {
        public Unverified(Path folder, String manifest) {
            super(folder.resolve(manifest).toString(), folder.getFileName() + " has no " + manifest + ", so nothing "
                    + "shows its files are the ones saved (written by an older build, or not by finetune): refused",
                    "if you trust its files, accept them by writing the manifest: cd '" + folder + "' && find . -type f"
                            + " ! -name " + manifest + " -printf '%P\\0' | sort -z | xargs -0 sha256sum > " + manifest
                            + "; else resume from an older checkpoint (resume_from_checkpoint: <its folder>) or start "
                            + "over in another output_dir");
        }
    }

    /** The file's SHA-256 in lower-case hex. */
    public static String sha256(Path file) throws IOException {
        MessageDigest digest;
        try {
            digest = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
        try (InputStream in = Files.newInputStream(file)) {
            byte[] buffer = new byte[1 << 20];
            for (int n; (n = in.read(buffer)) > 0; ) {
                digest.update(buffer, 0, n);
            }
        }
        return HexFormat.of().formatHex(digest.digest());
    }
}
