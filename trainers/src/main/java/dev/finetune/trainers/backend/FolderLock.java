package dev.finetune.trainers.backend;

import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * The OS lock on {@link OutputFolder#LOCK} that says a live run holds the folder. The kernel drops it when its
 * process dies, however it dies, so there is never a stale lock to clean up; the file's content (the holder's pid)
 * is only for messages. Apart from {@link OutputFolder}'s ownership rules because it is the one piece that talks to
 * the operating system rather than reading the folder.
 */
final class FolderLock implements AutoCloseable {
    private final FileChannel channel;
    private final FileLock lock;

    private FolderLock(FileChannel channel, FileLock lock) {
        this.channel = channel;
        this.lock = lock;
    }

    /** Takes the lock of an existing folder for this process, or refuses a folder another live run holds. */
    static FolderLock take(Path folder) throws IOException {
        FileChannel channel = FileChannel.open(folder.resolve(OutputFolder.LOCK), StandardOpenOption.CREATE,
                StandardOpenOption.READ, StandardOpenOption.WRITE);
        try {
            FileLock lock = tryLock(channel);
            if (lock == null) {
                throw busy(folder);
            }
            channel.truncate(0);
            channel.write(ByteBuffer.wrap((ProcessHandle.current().pid() + "\n").getBytes(StandardCharsets.UTF_8)));
            FolderLock taken = new FolderLock(channel, lock);
            channel = null;
            return taken;
        } finally {
            if (channel != null) {
                closeQuietly(channel);
            }
        }
    }

    /** Refuses, without taking it, a folder another live run holds. */
    static void requireFree(Path folder) {
        Path file = folder.resolve(OutputFolder.LOCK);
        if (!Files.isRegularFile(file)) {
            return;
        }
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.WRITE)) {
            FileLock lock = tryLock(channel);
            if (lock == null) {
                throw busy(folder);
            }
            lock.release();
        } catch (IOException e) {
            // unreadable lock file: the claim reports it when it opens the file itself
        }
    }

    /** Releases the lock (the kernel does it anyway when the process ends). */
    @Override
    public void close() {
        try {
            lock.release();
            channel.close();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Releases the lock of a claim that failed after taking it; its own error is the one to report. */
    void closeQuietly() {
        closeQuietly(channel);
    }

    private static void closeQuietly(FileChannel channel) {
        try {
            channel.close();
        } catch (IOException ignored) {
            // closing only releases the lock
        }
    }

    private static FileLock tryLock(FileChannel channel) throws IOException {
        try {
            return channel.tryLock();
        } catch (OverlappingFileLockException e) {
            return null; // this JVM already runs into this folder
        }
    }

    private static UserError busy(Path folder) {
        String holder = "";
        try {
            holder = Files.readString(folder.resolve(OutputFolder.LOCK), StandardCharsets.UTF_8).strip();
        } catch (IOException ignored) {
            // the pid is only for the message
        }
        return new UserError(folder.toString(), "another finetune run" + (holder.matches("\\d+") ? " (pid " + holder
                + ")" : "") + " is writing to this output_dir", "wait for it to finish, or choose another output_dir");
    }
}
