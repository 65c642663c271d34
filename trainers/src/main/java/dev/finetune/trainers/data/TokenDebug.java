package dev.finetune.trainers.data;

import dev.finetune.trainers.text.Tokenizer;
import java.util.List;
import java.util.Locale;

/**
 * What {@code preprocess --debug} shows, as Axolotl's does: examples token by token, each as its text and id, the
 * tokens the loss is computed on in brackets (and green on a terminal, the masked ones red), then the counts.
 */
public final class TokenDebug {
    private static final String GREEN = "\u001b[32m";
    private static final String RED = "\u001b[31m";
    private static final String RESET = "\u001b[0m";

    private TokenDebug() {}

    /**
     * One example: {@code text(id)} per masked token and {@code [text(id)]} per trained one; newlines and other
     * control characters are written as escapes so every token stays visible.
     */
    public static String render(Example example, Tokenizer tokenizer, boolean color) {
        StringBuilder s = new StringBuilder();
        for (int t = 0; t < example.length(); t++) {
            int id = example.inputIds()[t];
            String text = visible(tokenizer.decode(new int[] {id}, false));
            boolean trained = example.labels()[t] != Example.IGNORE;
            if (t > 0) {
                s.append(' ');
            }
            if (color) {
                s.append(trained ? GREEN : RED);
            }
            s.append(trained ? "[" : "").append(text).append('(').append(id).append(')').append(trained ? "]" : "");
            if (color) {
                s.append(RESET);
            }
        }
        return s.toString();
    }

    /** Examples, tokens, and how many of them are trained on. */
    public static String counts(List<Example> examples) {
        long tokens = 0;
        long trained = 0;
        for (Example example : examples) {
            tokens += example.length();
            for (int label : example.labels()) {
                trained += label != Example.IGNORE ? 1 : 0;
            }
        }
        return String.format(Locale.ROOT, "%d examples, %d tokens, %d trained on (%.1f%%)", examples.size(), tokens,
                trained, tokens == 0 ? 0.0 : 100.0 * trained / tokens);
    }

    private static String visible(String text) {
        StringBuilder s = new StringBuilder();
        for (char c : text.toCharArray()) {
            switch (c) {
                case '\n' -> s.append("\\n");
                case '\t' -> s.append("\\t");
                case '\r' -> s.append("\\r");
                default -> s.append(c < 0x20 ? String.format(Locale.ROOT, "\\u%04x", (int) c) : String.valueOf(c));
            }
        }
        return s.toString();
    }
}
