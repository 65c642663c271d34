package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Entry;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Sequence;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * Reads {@code trl.reward_funcs}: each item a built-in's name ({@code numeric_answer}), a mapping naming a built-in
 * with its parameters ({@code {name: contains, words: [dragon]}}), or a mapping with a {@code command}. Axolotl
 * takes dotted paths to Python functions here; those cannot run in this trainer and are refused with a pointer.
 */
final class RewardSpecs {
    /** TRL's think/answer format reward, the usual meaning of "format" in GRPO recipes. */
    static final String THINK_ANSWER = "\\s*<think>.*?</think>\\s*<answer>.*?</answer>\\s*";

    /**
     * TRL's {@code think_format_reward}: the completion opens with one {@code <think>...</think>} block (its
     * {@code ^<think>(?!.*<think>)(.*?)</think>.*$}, matched from the start with DOTALL, i.e. over the whole text).
     */
    static final String TRL_THINK_FORMAT = "<think>(?!.*<think>).*?</think>.*";

    /**
     * TRL's other reward functions ({@code trl.rewards}), named as {@code trl grpo --reward_funcs} takes them: what
     * to write instead. They need Python libraries (math_verify) or take parameters their name does not carry.
     */
    static final Map<String, String> TRL_REWARDS = Map.of(
            "accuracy_reward", "for numeric answers write {name: numeric_answer, field: solution}; for LaTeX answers "
                    + "{command: ...} with a script that calls math_verify",
            "reasoning_accuracy_reward", "for numeric answers write {name: numeric_answer, field: solution}; "
                    + "for LaTeX answers {command: ...} with a script that calls math_verify",
            "get_cosine_scaled_reward", "write {command: ...} with a script that scores correctness and length",
            "get_soft_overlong_punishment", "write {name: length, unit: chars, max: N} or {command: ...}",
            "get_repetition_penalty_reward", "set trl.repetition_penalty for sampling, or write {command: ...}");

    /** What a {@code command} reward may hold. */
    private static final List<String> COMMAND_KEYS = List.of("command", "name", "label", "timeout");

    /** Built-in name → the parameters it takes (besides {@code name} and {@code label}). */
    static final Map<String, List<String>> BUILT_INS = builtIns();

    private static Map<String, List<String>> builtIns() {
        Map<String, List<String>> m = new LinkedHashMap<>();
        m.put("exact_match", List.of("field", "ignore_case"));
        m.put("regex_match", List.of("pattern", "ignore_case"));
        m.put("numeric_answer", List.of("field", "tolerance"));
        m.put("length", List.of("min", "max", "unit"));
        m.put("contains", List.of("words", "field", "ignore_case"));
        m.put("format", List.of("pattern"));
        m.put("think_format_reward", List.of());
        return m;
    }

    private final Problems problems;
    private final Path recipeDir;

    private RewardSpecs(Problems problems, Path recipeDir) {
        this.problems = problems;
        this.recipeDir = recipeDir;
    }

    /** Every item read; broken ones are reported to {@code problems} and left out. */
    static List<RewardSpec> read(YamlNode node, Path recipeDir, Problems problems) {
        List<YamlNode> items = node instanceof Sequence s ? s.items() : List.of(node);
        RewardSpecs reader = new RewardSpecs(problems, recipeDir);
        List<RewardSpec> specs = new ArrayList<>();
        Set<String> labels = new HashSet<>();
        for (YamlNode item : items) {
            RewardSpec spec = reader.item(item);
            if (spec == null) {
                continue;
            }
            if (!labels.add(spec.label())) {
                problems.error(item.where(), "two reward functions are both logged as rewards/" + spec.label(),
                        "give one of them a label: {name: " + spec.label() + ", label: other_name, ...}");
            }
            specs.add(spec);
        }
        return specs;
    }

    private RewardSpec item(YamlNode item) {
        if (item instanceof Scalar s && s.value() instanceof String name) {
            return byName(name, s, new Mapping(Map.of(), s.where()));
        }
        if (!(item instanceof Mapping m)) {
            problems.error(item.where(), "a reward function must be a name or a mapping, got " + YamlNode.describe(item),
                    "write e.g. numeric_answer or {name: contains, words: [dragon]}");
            return null;
        }
        if (m.entries().containsKey("command")) {
            KeyReader c = new KeyReader(m, "", COMMAND_KEYS, problems);
            String command = c.string("command", null);
            String name = c.string("name", "command");
            String label = c.string("label", name);
            int timeout = c.integer("timeout", RewardSpec.Command.DEFAULT_TIMEOUT_SECONDS, 1,
                    RewardSpec.Command.MAX_TIMEOUT_SECONDS);
            for (Entry other : c.unread()) {
                problems.error(other.keyWhere(), "a command reward takes command, name and "
                        + "timeout, not '" + other.key() + "'", "remove it; the command reads every row's fields on stdin");
            }
            if (command == null || command.isBlank()) {
                problems.error(m.where(), "the reward command is empty", "write e.g. command: python3 score.py");
                return null;
            }
            return new RewardSpec.Command(label, command, m.where().dir() != null ? m.where().dir() : recipeDir, timeout);
        }
        Entry nameEntry = m.entries().get("name");
        if (nameEntry == null || nameEntry.value() instanceof Scalar s && s.value() == null) {
            problems.error(m.where(), "a reward function mapping needs a name (a built-in) or a command",
                    "write e.g. {name: contains, words: [dragon]}; built-ins: " + String.join(", ", BUILT_INS.keySet()));
            return null;
        }
        String name = new KeyReader(new Mapping(Map.of("name", nameEntry), m.where()), "", List.of("name"), problems)
                .string("name", null);
        Map<String, Entry> params = new LinkedHashMap<>(m.entries());
        params.remove("name");
        // messages about a missing parameter point where the old reader did: at the built-in's name
        return name == null ? null : byName(name, nameEntry.value(), new Mapping(params, nameEntry.value().where()));
    }

    private RewardSpec byName(String name, YamlNode where, Mapping params) {
        if (TRL_REWARDS.containsKey(name)) {
            problems.error(where.where(), "reward function '" + name + "' is TRL's Python function: unsupported, "
                    + "finetune runs no Python in the recipe's process", TRL_REWARDS.get(name));
            return null;
        }
        if (!BUILT_INS.containsKey(name)) {
            if (name.contains(".")) {
                problems.error(where.where(), "reward function '" + name + "' is a Python function (Axolotl/TRL): "
                        + "unsupported, finetune runs no Python in the recipe's process", "use a built-in (" + String.join(", ", BUILT_INS.keySet())
                        + ") or {command: ...} with a script that reads JSON lines");
            } else {
                String close = Suggestions.closest(name, BUILT_INS.keySet());
                problems.error(where.where(), "unknown reward function '" + name + "'", close != null
                        ? "did you mean '" + close + "'?" : "built-ins: " + String.join(", ", BUILT_INS.keySet())
                                + ", or {command: ...}");
            }
            return null;
        }
        List<String> allowed = new ArrayList<>(BUILT_INS.get(name));
        allowed.add("label");
        KeyReader p = new KeyReader(params, name + ".", allowed, problems);
        String label = p.string("label", name);
        RewardSpec spec = switch (name) {
            case "exact_match" -> new RewardSpec.ExactMatch(label, p.string("field", "answer"), p.bool("ignore_case", false));
            case "regex_match" -> {
                String pattern = required(p, name, "pattern", "{name: regex_match, pattern: '\\\\bdragon\\\\b'}");
                yield pattern == null || !compiles(p, name, "pattern", pattern) ? null
                        : new RewardSpec.RegexMatch(label, pattern, p.bool("ignore_case", false));
            }
            case "numeric_answer" -> new RewardSpec.NumericAnswer(label, p.string("field", "answer"),
                    p.number("tolerance", 1e-6, 0, Double.MAX_VALUE));
            case "length" -> {
                boolean hasMax = p.has("max");
                Double max = p.number("max", null, 0, Double.MAX_VALUE);
                int min = p.number("min", 0.0, 0, Double.MAX_VALUE).intValue();
                String unit = p.string("unit", "words");
                if (!unit.equals("words") && !unit.equals("chars")) {
                    problems.error(p.at("unit"), "length unit '" + unit + "' is not words or chars", "use unit: words");
                    yield null;
                }
                if (!hasMax) {
                    problems.error(where.where(), "reward function " + name + " needs max", "write e.g. "
                            + "{name: length, min: 5, max: 40}");
                    yield null;
                }
                if (max == null || max < min) {
                    if (max != null) {
                        problems.error(p.at("max"), "length max must be a number of at least min (" + min + ")",
                                "write e.g. max: 40");
                    }
                    yield null;
                }
                yield new RewardSpec.Length(label, min, max.intValue(), unit);
            }
            case "contains" -> {
                List<String> words = p.strings("words", true);
                words = words == null ? List.of() : words.stream().filter(w -> !w.isBlank()).toList();
                String field = p.string("field", null);
                if (words.isEmpty() == (field == null)) {
                    problems.error(where.where(), "contains needs exactly one of words (a list) or field (the row's "
                            + "field holding the words)", "write e.g. {name: contains, words: [dragon]}");
                    yield null;
                }
                yield new RewardSpec.Contains(label, words, field, p.bool("ignore_case", true));
            }
            case "format" -> {
                String pattern = p.string("pattern", THINK_ANSWER);
                yield compiles(p, name, "pattern", pattern) ? new RewardSpec.Format(label, pattern) : null;
            }
            case "think_format_reward" -> new RewardSpec.Format(label, TRL_THINK_FORMAT);
            default -> throw new IllegalStateException(name);
        };
        for (Entry other : p.unread()) {
            String close = Suggestions.closest(other.key(), allowed);
            problems.error(other.value().where(), "reward function " + name + " has no parameter '"
                    + other.key() + "'", close != null ? "did you mean '" + close + "'?"
                            : "its parameters: " + String.join(", ", allowed));
        }
        return spec;
    }

    /** A text parameter the built-in cannot do without. */
    private String required(KeyReader p, String name, String key, String example) {
        String v = p.string(key, null);
        if (v == null && !p.has(key)) {
            problems.error(p.where(), "reward function " + name + " needs " + key, "write e.g. " + example);
        }
        return v;
    }

    private boolean compiles(KeyReader p, String name, String key, String pattern) {
        try {
            Pattern.compile(pattern);
            return true;
        } catch (PatternSyntaxException e) {
            problems.error(p.at(key), name + "." + key + " is not a valid regular expression: "
                    + e.getDescription(), "check the pattern (Java regex syntax)");
            return false;
        }
    }
}
