package dev.finetune.recipes;

import dev.finetune.recipes.RecipeKeys.Key;
import dev.finetune.recipes.RecipeKeys.Status;
import dev.finetune.recipes.YamlNode.Entry;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Sequence;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What becomes of the keys no section reader took: the key table's status decides between a warning (ignored,
 * legacy), an error (unsupported, removed, unknown, with the closest known key of the same mapping) and a bug (a
 * supported key that the reader skipped). Axolotl silently drops such keys; we never do.
 */
final class LeftoverKeys {
    private LeftoverKeys() {}

    /**
     * Reports every key nobody read: ignored keys warn, unsupported/removed keys fail when enabled, legacy keys warn
     * (or fail when a current key is a typo away), unknown keys fail with the closest known key of the same mapping.
     *
     * @param scope the table prefix of the mapping's keys: {@code ""}, {@code "trl."}, {@code "datasets[]."}
     */
    static void report(List<Entry> unread, String scope, Problems problems) {
        List<String> siblings = null;
        // one warning per reason, naming every key it applies to: a recipe with ten kernel switches reads one line
        Map<String, List<Entry>> ignoredByReason = new LinkedHashMap<>();
        for (Entry e : unread) {
            String full = scope + e.key();
            Key key = RecipeKeys.get(full);
            Status status = key == null ? null : key.status();
            if (status == Status.SUPPORTED) {
                // The table promises this key is read into the Recipe; a reader that skipped it is a bug, not bad input.
                throw new IllegalStateException("supported key '" + full + "' was never read");
            }
            if (status == Status.IGNORED) {
                if (enabled(e.value())) {
                    ignoredByReason.computeIfAbsent("is ignored: " + key.note(), k -> new ArrayList<>()).add(e);
                }
            } else if (status == Status.UNSUPPORTED) {
                if (enabled(e.value())) {
                    problems.error(e.keyWhere(), "'" + full + "' is unsupported: " + key.note(),
                            "remove '" + e.key() + "' (or set it to false)");
                }
            } else if (status == Status.REMOVED) {
                if (enabled(e.value())) problems.error(e.keyWhere(), "'" + full + "' is no longer supported by Axolotl either", key.note());
            } else if (status == Status.LEGACY) {
                siblings = siblings != null ? siblings : currentSiblings(scope);
                String typo = Suggestions.typoOf(e.key(), siblings);
                if (typo != null) {
                    problems.error(e.keyWhere(), "unknown key '" + full + "' (an old Axolotl key that Axolotl now drops: "
                            + key.note() + ")", "did you mean '" + typo + "'?");
                } else {
                    ignoredByReason.computeIfAbsent("is ignored, as Axolotl does: " + key.note(), k -> new ArrayList<>()).add(e);
                }
            } else if (status == Status.UNKNOWN) {
                problems.error(e.keyWhere(), "unknown key '" + full + "' (Axolotl silently drops it)",
                        key.note().startsWith("remove") ? key.note() : "did you mean '" + key.note() + "'?");
            } else {
                siblings = siblings != null ? siblings : currentSiblings(scope);
                String close = Suggestions.closest(e.key(), siblings);
                String shown = visible(full);
                problems.error(e.keyWhere(), "unknown key '" + shown + "'" + (shown.equals(full) ? ""
                        : " (it holds invisible characters, shown as \\u escapes)"),
                        close != null ? "did you mean '" + close + "'?"
                                : "remove it: no known key is close to this name");
            }
        }
        warnIgnored(ignoredByReason, scope, problems);
    }

    /** {@code 'a' is ignored: why}, or {@code 'a', 'b' and 'c' are ignored (3 keys): why}, at the first key. */
    private static void warnIgnored(Map<String, List<Entry>> byReason, String scope, Problems problems) {
        byReason.forEach((reason, entries) -> {
            List<String> names = entries.stream().map(e -> "'" + scope + e.key() + "'").toList();
            String keys = names.size() == 1 ? names.get(0)
                    : String.join(", ", names.subList(0, names.size() - 1)) + " and " + names.get(names.size() - 1);
            String message = names.size() == 1 ? keys + " " + reason
                    : keys + " are" + reason.substring("is".length()).replaceFirst(":", " (" + names.size() + " keys):");
            problems.warn(entries.get(0).keyWhere(), message, names.size() == 1 ? "remove it to silence this warning"
                    : "remove them to silence this warning");
        });
    }

    /** True when a value turns a feature on: not null, false, 0, "" or an empty collection. */
    static boolean enabled(YamlNode n) {
        if (n instanceof Scalar s) {
            Object v = s.value();
            return !(v == null || Boolean.FALSE.equals(v) || (v instanceof Number num && num.doubleValue() == 0)
                    || (v instanceof String t && (t.isEmpty() || t.equalsIgnoreCase("none"))));
        }
        if (n instanceof Sequence seq) {
            return !seq.items().isEmpty();
        }
        return !((Mapping) n).entries().isEmpty();
    }

    /** Keys of this mapping that today's Axolotl (or finetune) knows: what a misspelt key is compared with. */
    private static List<String> currentSiblings(String scope) {
        List<String> siblings = new ArrayList<>();
        for (Key k : RecipeKeys.all()) {
            if (k.name().startsWith(scope) && k.name().indexOf('.', scope.length()) < 0
                    && k.name().indexOf('[', scope.length()) < 0 && k.status() != Status.UNKNOWN && k.status() != Status.LEGACY) {
                siblings.add(k.name().substring(scope.length()));
            }
        }
        return siblings;
    }

    /** {@code text} with invisible and control characters written as {@code \\uXXXX}, so a message shows them. */
    static String visible(String text) {
        StringBuilder out = new StringBuilder();
        text.codePoints().forEach(c -> {
            int type = Character.getType(c);
            boolean invisible = Character.isISOControl(c) || type == Character.FORMAT || type == Character.UNASSIGNED
                    || (Character.isWhitespace(c) && c != ' ') || Character.isSpaceChar(c) && c != ' ';
            out.append(invisible ? String.format("\\u%04x", c) : new String(Character.toChars(c)));
        });
        return out.toString();
    }
}
