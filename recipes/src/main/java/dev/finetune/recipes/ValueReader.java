package dev.finetune.recipes;

import dev.finetune.recipes.RecipeKeys.Key;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Sequence;
import java.util.ArrayList;
import java.util.List;

/**
 * Reads one written value as the type its key takes, and reports a value that is not one: what it must be, what
 * was written, and an example to copy. Apart from {@link KeyReader} (which keys a mapping holds and which were read)
 * because every rule about a value's shape and every message about a wrong one lives here, once.
 *
 * <p>Each read gets the node as written, {@code null} when the key is absent or empty (then the fallback is the
 * answer). A refused value is recorded in {@link Problems#invalid} and reads as the fallback, so later rules don't
 * pile up follow-on errors.
 */
final class ValueReader {

    private final String scope;
    /** Whether the key table lists these keys (then its defaults serve as examples in messages). */
    private final boolean tableKeys;
    private final Problems problems;

    /** @param scope what messages put before a key: {@code ""}, {@code "trl."}, {@code "datasets[]."} */
    ValueReader(String scope, boolean tableKeys, Problems problems) {
        this.scope = scope;
        this.tableKeys = tableKeys;
        this.problems = problems;
    }

    String string(String key, YamlNode n, String fallback) {
        if (n == null) {
            return fallback;
        }
        if (n instanceof Scalar s && !(s.value() instanceof Boolean)) {
            return s.text();
        }
        typeError(key, n, "a text value", key + ": some-text");
        return fallback;
    }

    /** A string that must be one of {@code choices}; {@code at} is where the value was written. */
    String choice(String key, YamlNode n, YamlNode.Where at, String fallback, List<String> choices) {
        if (n == null) {
            return fallback;
        }
        // YAML 1.1 reads a bare no/off as false; where the word as written is a choice (save_strategy: no), it is meant
        if (!(n instanceof Scalar s) || s.value() instanceof Boolean && !choices.contains(s.text())) {
            typeError(key, n, "a text value", key + ": some-text");
            return fallback;
        }
        String v = s.text();
        if (!choices.contains(v)) {
            String close = Suggestions.closest(v, choices);
            problems.error(at, scope + key + " is '" + v + "', which is not one of " + String.join(", ", choices),
                    close != null ? "did you mean '" + close + "'?" : "use one of " + String.join(", ", choices));
            return fallback;
        }
        return v;
    }

    Boolean bool(String key, YamlNode n, Boolean fallback) {
        if (n == null) {
            return fallback;
        }
        if (n instanceof Scalar s) {
            if (s.value() instanceof Boolean b) {
                return b;
            }
            if (s.value() instanceof String t && (t.equalsIgnoreCase("true") || t.equalsIgnoreCase("false"))) {
                return Boolean.parseBoolean(t);
            }
        }
        typeError(key, n, "true or false", key + ": true");
        return fallback;
    }

    /** {@code true}, {@code false} or {@code auto}. */
    Recipe.Flag flag(String key, YamlNode n, Recipe.Flag fallback) {
        if (n == null) {
            return fallback;
        }
        if (n instanceof Scalar s) {
            if (s.value() instanceof Boolean b) {
                return b ? Recipe.Flag.TRUE : Recipe.Flag.FALSE;
            }
            if ("auto".equals(s.value())) {
                return Recipe.Flag.AUTO;
            }
        }
        typeError(key, n, "true, false or auto", key + ": true");
        return fallback;
    }

    /**
     * A whole number in [{@code min}, {@code max}]; numeric text such as {@code "8"} is accepted, as Axolotl's schema
     * does. The message shows the value as written, never a clamped one.
     */
    Integer integer(String key, YamlNode n, Integer fallback, long min, long max) {
        if (n == null) {
            return fallback;
        }
        Long v = YamlNumbers.wholeNumber(n);
        if (v == null) {
            problems.invalid.add(scope + key);
            if (n instanceof Scalar s && s.value() instanceof Double d && !d.isNaN()) {
                // 1e400 is infinite and rounds to Long.MAX_VALUE: an example must be a value the key takes
                long example = Double.isFinite(d) && Math.round(d) <= Math.min(max, Integer.MAX_VALUE)
                        ? Math.max(min, Math.round(d)) : Math.max(min, 1);
                problems.error(n.where(), scope + key + " must be a whole number, got " + s.text(),
                        key.startsWith("warmup_steps") ? "write a whole number of steps, or use warmup_ratio: " + s.text()
                                : "write e.g. " + key + ": " + example);
            } else {
                typeError(key, n, "a whole number", key + ": " + Math.max(min, 1));
            }
            return fallback;
        }
        if (v < min || v > max || v > Integer.MAX_VALUE) {
            problems.invalid.add(scope + key);
            String written = n instanceof Scalar s ? s.text().strip() : Long.toString(v);
            String range = v < min ? (min == 1 ? "at least 1" : min == 0 ? "0 or more" : "at least " + min)
                    : "at most " + Math.min(max, Integer.MAX_VALUE);
            problems.error(n.where(), scope + key + " must be " + range + ", got " + written,
                    "write e.g. " + key + ": " + Math.max(min, 1));
            return fallback;
        }
        return v.intValue();
    }

    /** A finite number in [{@code min}, {@code max}]. */
    Double number(String key, YamlNode n, Double fallback, double min, double max) {
        if (n == null) {
            return fallback;
        }
        Double v = YamlNumbers.realNumber(n);
        if (v == null || v.isNaN() || v.isInfinite()) {
            typeError(key, n, "a number", key + ": " + example(key));
            return fallback;
        }
        if (v < min || v > max) {
            problems.invalid.add(scope + key);
            // Double.MIN_VALUE stands for "greater than 0"; printing it (4.9E-324) would help nobody
            boolean positive = min == Double.MIN_VALUE;
            String lower = positive ? "greater than 0" : min == 0 ? "0 or more" : "at least " + YamlNumbers.fmt(min);
            String range = max == Double.MAX_VALUE ? lower
                    : positive ? "greater than 0 and at most " + YamlNumbers.fmt(max)
                    : "between " + YamlNumbers.fmt(min) + " and " + YamlNumbers.fmt(max);
            double example = Math.max(min, Math.min(max, Math.abs(v)));
            problems.error(n.where(), scope + key + " must be " + range + ", got " + YamlNumbers.fmt(v),
                    "write e.g. " + key + ": " + (positive && example < 1e-300 ? example(key) : YamlNumbers.fmt(example)));
            return fallback;
        }
        return v;
    }

    /** A list of text items; a single text value counts as a one-item list (as Axolotl allows for module names). */
    List<String> strings(String key, YamlNode n, boolean singleAllowed) {
        if (n == null) {
            return null;
        }
        if (singleAllowed && n instanceof Scalar s && s.value() instanceof String t) {
            return List.of(t);
        }
        if (n instanceof Sequence seq) {
            List<String> out = new ArrayList<>();
            for (YamlNode item : seq.items()) {
                if (item instanceof Scalar s && s.value() != null && !(s.value() instanceof Boolean)) {
                    out.add(s.text());
                } else {
                    problems.error(item.where(), "items of " + scope + key + " must be text, got " + YamlNode.describe(item),
                            "write each item as plain text");
                    return null;
                }
            }
            return List.copyOf(out);
        }
        typeError(key, n, "a list", key + ": [a, b]");
        return null;
    }

    Mapping mapping(String key, YamlNode n) {
        if (n == null) {
            return null;
        }
        if (n instanceof Mapping m) {
            return m;
        }
        typeError(key, n, "a mapping of keys", key + ": {sub_key: value}");
        return null;
    }

    /** A plausible value for messages: the table's default, else a typical setting. */
    private String example(String key) {
        Key spec = tableKeys ? RecipeKeys.get(scope + key) : null;
        if (spec != null && !spec.defaultValue().isEmpty() && !spec.scoped()) {
            return spec.defaultValue();
        }
        return switch (key) {
            case "learning_rate" -> "2e-4";
            case "lora_alpha" -> "32";
            case "rl_beta", "beta" -> "0.1";
            default -> "1";
        };
    }

    private void typeError(String key, YamlNode n, String expected, String example) {
        problems.invalid.add(scope + key);
        problems.error(n.where(), scope + key + " must be " + expected + ", got " + YamlNode.describe(n),
                "write e.g. '" + example + "'");
    }
}
