package dev.finetune.recipes;

import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What a JSON parser (Gson) says is wrong with a text, in a user's words: the reason and where, without the
 * library's class names, its troubleshooting links, or its advice to parse leniently (we never do).
 */
public final class JsonProblems {
    private static final Pattern LOCATION = Pattern.compile(" at line (\\d+) column (\\d+)(?: path \\S*)?");

    private JsonProblems() {}

    public static String reason(Exception e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause().getMessage() != null) {
            root = root.getCause();
        }
        String message = root.getMessage() == null ? root.getClass().getSimpleName() : root.getMessage();
        int see = message.indexOf("\nSee ");
        if (see >= 0) {
            message = message.substring(0, see);
        }
        message = message.replaceAll("[a-z]+(\\.[a-z]+)+\\.[A-Z][A-Za-z]*(Exception|Error): ", "")
                .replaceAll("Use JsonReader\\.(setStrictness\\(Strictness\\.LENIENT\\)|setLenient\\(true\\)) to accept "
                        + "malformed JSON", "malformed JSON");
        Matcher at = LOCATION.matcher(message);
        String where = "";
        if (at.find()) {
            where = " at line " + at.group(1) + " column " + at.group(2);
            message = message.substring(0, at.start()) + message.substring(at.end());
        }
        return message.strip() + where;
    }
}
