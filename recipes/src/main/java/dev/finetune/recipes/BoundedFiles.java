package dev.finetune.recipes;

import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;

/**
 * Reading files that come from recipes, model folders, datasets and checkpoints, which anyone may have made: only
 * regular files (a FIFO or a device such as {@code /dev/zero} may never end), and never more than a bound, so a
 * hostile or broken file is one clear line instead of an {@code OutOfMemoryError}.
 */
public final class BoundedFiles {
    /** A JSON configuration file: config.json, tokenizer_config.json, adapter_config.json, our own state files. */
    public static final long CONFIG_BYTES = 16L << 20;
    /** One row of a dataset: a line of JSON Lines, an element of a JSON array. */
    public static final int LINE_BYTES = 64 << 20;
    /**
     * A data file's description of itself (a Parquet footer or page, an Arrow message header): what it claims is
     * checked against this and against the file's real size before anything that size is allocated.
     */
    public static final int METADATA_BYTES = 64 << 20;

    private BoundedFiles() {}

    /**
     * The UTF-8 text of {@code file}, refused (naming {@code file}) when it is not a regular file, is larger than
     * {@code maxBytes}, or is not UTF-8.
     *
     * @param what what the file is, for messages ("the model's config.json")
     */
    public static String readText(Path file, long maxBytes, String what) {
        requireRegular(file, what);
        byte[] bytes;
        try (InputStream in = Files.newInputStream(file)) {
            // bounded even if the file grows while it is read
            bytes = in.readNBytes((int) Math.min(Integer.MAX_VALUE - 16, maxBytes + 1));
        } catch (NoSuchFileException e) {
            throw new UserError(file.toString(), what + " does not exist", "check the path");
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot read " + what + ": " + e.getMessage(),
                    "check the file's permissions");
        }
        if (bytes.length > maxBytes) {
            throw new UserError(file.toString(), what + " is over " + size(maxBytes) + ", far more than such a file "
                    + "holds", "check that the path names the right file");
        }
        try {
            return decoder().decode(ByteBuffer.wrap(bytes)).toString();
        } catch (CharacterCodingException e) {
            throw new UserError(file.toString(), what + " is not UTF-8 text", "check that the path names the right file");
        }
    }

    /** Refuses anything but a regular file (links are followed): a device or a pipe has no end to read to. */
    public static void requireRegular(Path file, String what) {
        if (Files.exists(file) && !Files.isRegularFile(file)) {
            throw new UserError(file.toString(), what + " is " + (Files.isDirectory(file) ? "a folder"
                    : "not a regular file (a device or a pipe), which may never end"), "name a regular file");
        }
    }

    /** "64 MiB", "512 KiB". */
    public static String size(long bytes) {
        return bytes >= 1 << 20 ? String.format(Locale.ROOT, "%d MiB", bytes >> 20)
                : String.format(Locale.ROOT, "%d KiB", bytes >> 10);
    }

    private static java.nio.charset.CharsetDecoder decoder() {
        return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT);
    }

    /**
     * The lines of a file, each at most {@code maxBytes}: a line over it (a dataset with no newline in gigabytes)
     * is refused as "line N is over X" without holding more than the bound. Lines that are not UTF-8 come back as
     * {@code null} text with their number, for the caller to report as a row.
     */
    public static final class Lines implements Closeable {
        private final Path file;
        private final InputStream in;
        private final int maxBytes;
        private final String hint;
        private final byte[] chunk = new byte[1 << 16];
        private int position;
        private int limit;
        private byte[] buffer = new byte[8192];
        private long number;

        public Lines(Path file, int maxBytes, String what) {
            requireRegular(file, what);
            this.file = file;
            this.maxBytes = maxBytes;
            this.hint = jsonLinesHint(maxBytes);
            try {
                this.in = Files.newInputStream(file);
            } catch (NoSuchFileException e) {
                throw new UserError(file.toString(), what + " does not exist", "check the path");
            } catch (IOException e) {
                throw new UserError(file.toString(), "cannot read " + what + ": " + e.getMessage(),
                        "check the file's permissions");
            }
        }

        /** The lines of {@code in} (already open: a decompressing stream, say), named {@code file} in messages. */
        public Lines(Path file, InputStream in, int maxBytes) {
            this(file, in, maxBytes, jsonLinesHint(maxBytes));
        }

        /** As above, with the hint an over-long line gets (what a line of this file is). */
        public Lines(Path file, InputStream in, int maxBytes, String hint) {
            this.file = file;
            this.maxBytes = maxBytes;
            this.in = in;
            this.hint = hint;
        }

        private static String jsonLinesHint(int maxBytes) {
            return "split the data into one JSON object per line, each under " + size(maxBytes);
        }

        /** One line read: its 1-based number and text, or {@code text == null} when it is not valid UTF-8. */
        public record Line(long number, String text) {}

        /** The next line (without its {@code \n} or {@code \r\n}), or null at the end of the file. */
        public Line next() throws IOException {
            int length = 0;
            boolean any = false;
            while (true) {
                if (position == limit) {
                    limit = in.read(chunk);
                    position = 0;
                    if (limit <= 0) {
                        limit = 0;
                        if (!any) {
                            return null;
                        }
                        break;
                    }
                }
                any = true;
                int end = position;
                while (end < limit && chunk[end] != '\n') {
                    end++;
                }
                int piece = end - position;
                if ((long) length + piece > maxBytes) {
                    throw new UserError(file + ":" + (number + 1), "line " + (number + 1) + " is over "
                            + size(maxBytes) + " (the limit for one row; a file without line breaks?)", hint);
                }
                if (length + piece > buffer.length) {
                    buffer = Arrays.copyOf(buffer, (int) Math.min(maxBytes, Math.max((long) buffer.length * 2,
                            length + piece)));
                }
                System.arraycopy(chunk, position, buffer, length, piece);
                length += piece;
                position = end;
                if (end < limit) {
                    position++; // the \n
                    break;
                }
            }
            number++;
            if (length > 0 && buffer[length - 1] == '\r') {
                length--;
            }
            try {
                return new Line(number, decoder().decode(ByteBuffer.wrap(buffer, 0, length)).toString());
            } catch (CharacterCodingException e) {
                return new Line(number, null);
            }
        }

        @Override
        public void close() throws IOException {
            in.close();
        }
    }
}
