package dev.finetune.trainers.hub;

import com.google.gson.GsonBuilder;
import com.google.gson.JsonObject;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ConfigOverrides;
import dev.finetune.recipes.model.ModelConfig;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

/**
 * A model folder as the recipe's {@code overrides_of_model_config} changes it: the base folder's files linked, and its
 * own {@code config.json} with the overrides applied. Every reader of the model (the JVM trainer, the worker's
 * {@code from_pretrained}, the packing's vocabulary check, a full fine-tune's saved {@code config.json}) then reads one
 * folder and sees the same config, with nothing to pass along beside it.
 *
 * <p>The folder is named by a hash of the base folder and the merged config, under the user's cache
 * ({@code $XDG_CACHE_HOME/finetune/configured-models}, else {@code ~/.cache/...}, owner-only): the same recipe on
 * every node of a run, and every run of it, finds the same path, which the worker plan names.
 */
public final class ConfiguredModel {
    private ConfiguredModel() {}

    /** {@code base} itself without overrides, else the configured folder (made once, reused while it matches). */
    public static Path of(Path base, Map<String, Object> overrides) {
        if (overrides.isEmpty()) {
            return base;
        }
        JsonObject merged = ConfigOverrides.apply(ModelConfig.json(base), overrides);
        String config = new GsonBuilder().setPrettyPrinting().serializeNulls().create().toJson(merged) + "\n";
        try {
            Path real = base.toRealPath();
            Path root = root();
            Path folder = root.resolve(hash(real + "\n" + config));
            if (matches(folder, real, config)) {
                return folder;
            }
            Path staging = Files.createTempDirectory(root, ".staging-");
            try (Stream<Path> files = Files.list(real)) {
                for (Path file : files.toList()) {
                    String name = file.getFileName().toString();
                    if (!name.equals("config.json")) {
                        Files.createSymbolicLink(staging.resolve(name), file.toRealPath());
                    }
                }
            }
            Files.writeString(staging.resolve("config.json"), config, StandardCharsets.UTF_8);
            try {
                deleteTree(folder); // a folder that no longer matches its base (the base's files changed)
                Files.move(staging, folder, StandardCopyOption.ATOMIC_MOVE);
            } catch (FileAlreadyExistsException | AtomicMoveNotSupportedException e) {
                deleteTree(staging); // another process made it at the same moment: the same content
            }
            return folder;
        } catch (IOException e) {
            throw new UserError("overrides_of_model_config", "cannot make the model folder with the overridden "
                    + "config.json: " + e.getMessage(), "check that " + root() + " is writable (XDG_CACHE_HOME moves it)");
        }
    }

    /** The folder holds {@code config} and a link to each of the base's other files. */
    private static boolean matches(Path folder, Path base, String config) throws IOException {
        if (!Files.isRegularFile(folder.resolve("config.json"))
                || !Files.readString(folder.resolve("config.json"), StandardCharsets.UTF_8).equals(config)) {
            return false;
        }
        try (Stream<Path> files = Files.list(base)) {
            List<Path> others = files.filter(f -> !f.getFileName().toString().equals("config.json")).toList();
            for (Path file : others) {
                Path link = folder.resolve(file.getFileName().toString());
                if (!Files.isSymbolicLink(link) || !Files.readSymbolicLink(link).equals(file.toRealPath())) {
                    return false;
                }
            }
        }
        return true;
    }

    private static Path root() {
        String xdg = System.getenv("XDG_CACHE_HOME");
        Path cache = xdg != null && !xdg.isBlank() ? Path.of(xdg) : Path.of(System.getProperty("user.home"), ".cache");
        Path root = cache.resolve("finetune").resolve("configured-models");
        try {
            if (!Files.isDirectory(root)) {
                Files.createDirectories(root, PosixFilePermissions.asFileAttribute(
                        PosixFilePermissions.fromString("rwx------")));
            }
        } catch (IOException | UnsupportedOperationException e) {
            throw new UserError("overrides_of_model_config", "cannot make " + root + ": " + e.getMessage(),
                    "set XDG_CACHE_HOME to a writable folder");
        }
        return root;
    }

    private static String hash(String text) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(digest, 0, 8);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void deleteTree(Path folder) throws IOException {
        if (!Files.exists(folder, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(folder)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
