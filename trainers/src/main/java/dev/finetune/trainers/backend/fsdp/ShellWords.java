package dev.finetune.trainers.backend.fsdp;

import java.util.ArrayList;
import java.util.List;

/**
 * Values written into a shell script or command line we print: each one word, taken literally by POSIX shells. A
 * recipe override such as {@code output_dir=./out/$(touch X)} or one with a space must reach the program as the
 * user typed it, never be run or split.
 */
public final class ShellWords {
    private static final java.util.regex.Pattern PLAIN = java.util.regex.Pattern.compile("[A-Za-z0-9_./:=@%+,-]+");

    private ShellWords() {}

    /** {@code text} as one literal shell word: as is when it holds only safe characters, else single-quoted. */
    public static String quote(String text) {
        return PLAIN.matcher(text).matches() ? text : "'" + text.replace("'", "'\\''") + "'";
    }

    /** Each of {@code words} quoted, joined by spaces. */
    public static String join(List<String> words) {
        List<String> quoted = new ArrayList<>(words.size());
        words.forEach(w -> quoted.add(quote(w)));
        return String.join(" ", quoted);
    }
}
