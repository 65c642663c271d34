package dev.finetune.trainers.rewards;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import dev.finetune.recipes.RewardSpec;
import dev.finetune.recipes.UserError;
import java.util.ArrayList;
import java.util.List;
import java.util.function.ToDoubleFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The built-in reward functions: each a pure function of one completion and its row. */
final class BuiltInReward implements RewardFunction {
    private static final Pattern NUMBER = Pattern.compile("-?\\d[\\d,]*(?:\\.\\d+)?|-?\\.\\d+");

    private final String label;
    private final ToDoubleFunction<RewardInput> scorer;

    private BuiltInReward(String label, ToDoubleFunction<RewardInput> scorer) {
        this.label = label;
        this.scorer = scorer;
    }

    @Override
    public String label() {
        return label;
    }

    @Override
    public double[] score(List<RewardInput> inputs) {
        return inputs.stream().mapToDouble(scorer).toArray();
    }

    /** Character reads one regex match may make: linear patterns need a few per character, never this many. */
    static final long REGEX_STEPS = 20_000_000;

    /**
     * The completion as the regex engine sees it, counting every character it reads: a pattern from a shared
     * recipe that backtracks catastrophically ({@code (a+)+$}) stops with an error instead of running for hours.
     */
    static CharSequence bounded(String text, String label, String pattern) {
        return new CharSequence() {
            private long reads;

            @Override
            public int length() {
                return text.length();
            }

            @Override
            public char charAt(int index) {
                if (++reads > REGEX_STEPS) {
                    throw new UserError("trl.reward_funcs: " + label, "the pattern '" + pattern + "' took more than "
                            + REGEX_STEPS + " steps on one " + text.length() + "-character completion (catastrophic "
                            + "backtracking)", "rewrite it without nested repetition such as (a+)+ or (a|a)*");
                }
                return text.charAt(index);
            }

            @Override
            public CharSequence subSequence(int start, int end) {
                return text.subSequence(start, end);
            }

            @Override
            public String toString() {
                return text;
            }
        };
    }

    static RewardFunction of(RewardSpec spec) {
        if (spec instanceof RewardSpec.ExactMatch m) {
            return new BuiltInReward(m.label(), in -> {
                String want = field(in.fields(), m.field(), m.label()).strip();
                String got = in.completion().strip();
                return (m.ignoreCase() ? got.equalsIgnoreCase(want) : got.equals(want)) ? 1 : 0;
            });
        }
        if (spec instanceof RewardSpec.RegexMatch m) {
            Pattern p = Pattern.compile(m.pattern(), m.ignoreCase() ? Pattern.CASE_INSENSITIVE : 0);
            return new BuiltInReward(m.label(), in -> p.matcher(bounded(in.completion(), m.label(), m.pattern()))
                    .find() ? 1 : 0);
        }
        if (spec instanceof RewardSpec.NumericAnswer m) {
            return new BuiltInReward(m.label(), in -> {
                Double want = lastNumber(field(in.fields(), m.field(), m.label()));
                Double got = lastNumber(in.completion());
                return want != null && got != null && Math.abs(want - got) <= m.tolerance() ? 1 : 0;
            });
        }
        if (spec instanceof RewardSpec.Length m) {
            return new BuiltInReward(m.label(), in -> {
                String text = in.completion().strip();
                int length = m.unit().equals("chars") ? text.length() : text.isEmpty() ? 0 : text.split("\\s+").length;
                return length >= m.min() && length <= m.max() ? 1 : 0;
            });
        }
        if (spec instanceof RewardSpec.Contains m) {
            return new BuiltInReward(m.label(), in -> {
                List<String> words = m.field() == null ? m.words()
                        : List.of(field(in.fields(), m.field(), m.label()).strip().split("\\s*,\\s*|\\s+"));
                return shareContained(in.completion(), words, m.ignoreCase());
            });
        }
        if (spec instanceof RewardSpec.Format m) {
            Pattern p = Pattern.compile(m.pattern(), Pattern.DOTALL);
            return new BuiltInReward(m.label(), in -> p.matcher(bounded(in.completion(), m.label(), m.pattern()))
                    .matches() ? 1 : 0);
        }
        throw new IllegalArgumentException("not a built-in: " + spec);
    }

    /** Whole words only: "cat" is not found in "category". */
    static double shareContained(String completion, List<String> words, boolean ignoreCase) {
        if (words.isEmpty()) {
            return 0;
        }
        int found = 0;
        for (String word : words) {
            Pattern p = Pattern.compile("(?<!\\w)" + Pattern.quote(word) + "(?!\\w)",
                    ignoreCase ? Pattern.CASE_INSENSITIVE | Pattern.UNICODE_CASE : 0);
            found += p.matcher(completion).find() ? 1 : 0;
        }
        return (double) found / words.size();
    }

    /** The last number written in {@code text} ("1,234.5" reads as 1234.5), or null. */
    static Double lastNumber(String text) {
        Matcher m = NUMBER.matcher(text);
        String last = null;
        while (m.find()) {
            last = m.group();
        }
        return last == null ? null : Double.parseDouble(last.replace(",", ""));
    }

    private static String field(JsonObject fields, String name, String label) {
        JsonElement value = fields == null ? null : fields.get(name);
        if (value == null || value.isJsonNull()) {
            List<String> present = fields == null ? List.of() : new ArrayList<>(fields.keySet());
            throw new UserError("trl.reward_funcs: " + label, "the dataset row has no field '" + name + "' (it has "
                    + (present.isEmpty() ? "none" : String.join(", ", present)) + ")",
                    "add the field to every row, or set field: to the one that holds the answer");
        }
        return value.isJsonPrimitive() ? value.getAsString() : value.toString();
    }
}
