package dev.finetune.recipes;

import java.util.Collection;

/** "Did you mean": the known key closest to a misspelt one. */
final class Suggestions {

    private Suggestions() {}

    /** The closest candidate, or {@code null} when none is plausibly what the user meant. */
    static String closest(String word, Collection<String> candidates) {
        String best = null;
        int bestDistance = Integer.MAX_VALUE;
        int bestScore = Integer.MAX_VALUE;
        String lower = word.toLowerCase(java.util.Locale.ROOT);
        for (String c : candidates) {
            int d = distance(lower, c);
            // On a tie, a candidate that extends what was typed is the likelier intent (gpu -> gpus, not cpu).
            int score = 2 * d - (c.startsWith(lower) || lower.startsWith(c) ? 1 : 0);
            if (score < bestScore) {
                bestScore = score;
                bestDistance = d;
                best = c;
            }
        }
        if (best != null && bestDistance <= limit(word) && !aWordReplaced(lower, best)) {
            return best;
        }
        String byPrefix = null;
        for (String c : candidates) {
            if (c.length() >= 4 && (word.startsWith(c + "_") || c.startsWith(word)) && (byPrefix == null || c.length() > byPrefix.length())) {
                byPrefix = c;
            }
        }
        return byPrefix;
    }

    /**
     * The candidate within a typo's distance of {@code word} (the edit-distance rule of {@link #closest}, without its
     * prefix rule), or {@code null}: what makes a name look like a misspelling rather than a different key.
     */
    static String typoOf(String word, Collection<String> candidates) {
        String lower = word.toLowerCase(java.util.Locale.ROOT);
        int limit = limit(word);
        String best = null;
        int bestDistance = Integer.MAX_VALUE;
        for (String c : candidates) {
            int d = distance(lower, c);
            if (d < bestDistance) {
                bestDistance = d;
                best = c;
            }
        }
        return bestDistance <= limit && !aWordReplaced(lower, best) ? best : null;
    }

    /** How many edits still read as a slip of the keyboard: one in a short word, up to three in a long one. */
    private static int limit(String word) {
        return word.length() <= 4 ? 1 : word.length() <= 8 ? 2 : 3;
    }

    /**
     * Whether the two names differ by a whole word rather than a slip: {@code lion_pytorch} is another optimizer
     * than {@code came_pytorch}, though only four letters differ.
     */
    static boolean aWordReplaced(String word, String candidate) {
        String[] a = word.split("_");
        String[] b = candidate.split("_");
        if (a.length != b.length) {
            return false;
        }
        for (int i = 0; i < a.length; i++) {
            int longest = Math.max(a[i].length(), b[i].length());
            if (longest >= 3 && distance(a[i], b[i]) >= longest - (longest > 4 ? 1 : 0)) {
                return true;
            }
        }
        return false;
    }

    /** Optimal string alignment distance: adjacent transpositions count as one edit, as typos usually are. */
    static int distance(String a, String b) {
        int[][] d = new int[a.length() + 1][b.length() + 1];
        for (int i = 0; i <= a.length(); i++) {
            d[i][0] = i;
        }
        for (int j = 0; j <= b.length(); j++) {
            d[0][j] = j;
        }
        for (int i = 1; i <= a.length(); i++) {
            for (int j = 1; j <= b.length(); j++) {
                int cost = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
                d[i][j] = Math.min(Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1), d[i - 1][j - 1] + cost);
                if (i > 1 && j > 1 && a.charAt(i - 1) == b.charAt(j - 2) && a.charAt(i - 2) == b.charAt(j - 1)) {
                    d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
                }
            }
        }
        return d[a.length()][b.length()];
    }
}
