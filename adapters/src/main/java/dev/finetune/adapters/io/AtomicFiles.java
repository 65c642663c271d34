package dev.finetune.adapters.io;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Files and folders that appear whole or not at all: written under a hidden temporary name beside the target, then
 * renamed over it in one step, so a crash or a kill never leaves a half-written file where a reader looks. The one
 * place the project writes this way; a reader that finds {@code .NAME.tmp} leftovers may delete them.
 */
public final class AtomicFiles {

    /** Writes the temporary file it is given; the rename happens only when it returns normally. */
    @FunctionalInterface
    public interface Writer {
        void write(Path temporary) throws IOException;
    }

    private AtomicFiles() {}

    /** The hidden temporary name of {@code file}: {@code .NAME.tmp} in the same folder, so the rename is atomic. */
    public static Path temporary(Path file) {
        return file.resolveSibling("." + file.getFileName() + ".tmp");
    }

    /** {@code file} written by {@code writer}; the folder is created when missing, a failed write leaves nothing. */
    public static void write(Path file, Writer writer) throws IOException {
        Path parent = file.toAbsolutePath().getParent();
        if (parent != null) {
            Files.createDirectories(parent);
        }
        Path temporary = temporary(file);
        try {
            writer.write(temporary);
            publish(temporary, file);
        } finally {
            Files.deleteIfExists(temporary);
        }
    }

    /** {@code file} holding {@code text} in UTF-8. */
    public static void writeString(Path file, String text) throws IOException {
        write(file, temporary -> Files.writeString(temporary, text, StandardCharsets.UTF_8));
    }

    /**
     * Moves a finished file or folder ({@code staging}, in the same file system) to {@code target} in one rename;
     * {@code target} must not exist when {@code staging} is a folder.
     */
    public static void publish(Path staging, Path target) throws IOException {
        try {
            Files.move(staging, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (AtomicMoveNotSupportedException e) {
            throw new IOException("the file system of " + target + " cannot rename atomically", e);
        }
    }
}
