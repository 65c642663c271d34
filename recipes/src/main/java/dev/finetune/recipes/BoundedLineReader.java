package dev.finetune.recipes;

import java.io.Closeable;
import java.io.IOException;
import java.io.Reader;

/**
 * Lines of a child process's output (a reward command, torchrun's ranks), each cut at a bound: a program that prints
 * one endless line costs at most the bound, never all memory, and its reader hears of it at once. A cut line comes
 * back as soon as it reaches the bound, {@link #cut()} says so, and the rest of that line is skipped.
 */
public final class BoundedLineReader implements Closeable {
    private final Reader in;
    private final int maxChars;
    private final char[] chunk = new char[8192];
    private int position;
    private int limit;
    private boolean cut;
    /** The line returned last was cut: its rest is still to be skipped, up to its line break. */
    private boolean skipping;

    public BoundedLineReader(Reader in, int maxChars) {
        this.in = in;
        this.maxChars = maxChars;
    }

    /** The next line without its line break, at most the bound; null at the end of the stream. */
    public String readLine() throws IOException {
        StringBuilder line = new StringBuilder();
        boolean any = false;
        cut = false;
        while (true) {
            if (position == limit) {
                limit = in.read(chunk);
                position = 0;
                if (limit <= 0) {
                    limit = 0;
                    return any ? strip(line) : null;
                }
            }
            int end = position;
            while (end < limit && chunk[end] != '\n') {
                end++;
            }
            if (skipping) {
                position = end < limit ? end + 1 : end;
                skipping = end == limit;
                continue;
            }
            any = true;
            int room = maxChars - line.length();
            int piece = end - position;
            if (piece > room) {
                line.append(chunk, position, room);
                position += room;
                cut = true;
                skipping = true;
                return line.toString();
            }
            line.append(chunk, position, piece);
            position = end;
            if (end < limit) {
                position++;
                return strip(line);
            }
        }
    }

    /** Whether the line {@link #readLine} returned last was longer than the bound (and was cut). */
    public boolean cut() {
        return cut;
    }

    private static String strip(StringBuilder line) {
        int n = line.length();
        return n > 0 && line.charAt(n - 1) == '\r' ? line.substring(0, n - 1) : line.toString();
    }

    @Override
    public void close() throws IOException {
        in.close();
    }
}
