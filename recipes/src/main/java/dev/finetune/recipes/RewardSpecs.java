package dev.finetune.recipes;

import dev.finetune.recipes.KeyReader.Problems;
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
            return byName(name, s, Map.of());
        }
        if (!(item instanceof Mapping m)) {
            problems.error(item.where(), "a reward function must be a name or a mapping, got " + YamlNode.describe(item),
                    "write e.g. numeric_answer or {name: contains, words: [dragon]}");
            return null;
        }
        Map<String, YamlNode> params = new LinkedHashMap<>();
        m.entries().forEach((k, e) -> params.put(k, e.value()));
        if (params.containsKey("command")) {
            String command = text(params.get("command"), "command");
            String label = params.containsKey("label") ? text(params.get("label"), "label")
                    : params.containsKey("name") ? text(params.get("name"), "name") : "command";
            for (String key : params.keySet()) {
                if (!Set.of("command", "name", "label", "timeout").contains(key)) {
                    problems.error(m.entries().get(key).keyWhere(), "a command reward takes command, name and "
                            + "timeout, not '" + key + "'", "remove it; the command reads every row's fields on stdin");
                }
            }
            int timeout = RewardSpec.Command.DEFAULT_TIMEOUT_SECONDS;
            if (params.containsKey("timeout")) {
                YamlNode node = params.get("timeout");
                Long seconds = node instanceof Scalar s && s.value() instanceof Long l ? l : null;
                if (seconds == null || seconds < 1 || seconds > RewardSpec.Command.MAX_TIMEOUT_SECONDS) {
                    problems.error(node.where(), "timeout must be whole seconds from 1 to "
                            + RewardSpec.Command.MAX_TIMEOUT_SECONDS + ", got " + YamlNode.describe(node),
                            "write e.g. timeout: 60");
                } else {
                    timeout = seconds.intValue();
                }
            }
            if (command == null || command.isBlank()) {
                problems.error(m.where(), "the reward command is empty", "write e.g. command: python3 score.py");
                return null;
            }
            return new RewardSpec.Command(label, command, m.where().dir() != null ? m.where().dir() : recipeDir, timeout);
        }
        YamlNode nameNode = params.remove("name");
        if (nameNode == null) {
            problems.error(m.where(), "a reward function mapping needs a name (a built-in) or a command",
                    "write e.g. {name: contains, words: [dragon]}; built-ins: " + String.join(", ", BUILT_INS.keySet()));
            return null;
        }
        String name = text(nameNode, "name");
        return name == null ? null : byName(name, nameNode, params);
    }

    private RewardSpec byName(String name, YamlNode where, Map<String, YamlNode> params) {
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
        Params p = new Params(name, where, params);
        String label = p.text("label", name);
        RewardSpec spec = switch (name) {
            case "exact_match" -> new RewardSpec.ExactMatch(label, p.text("field", "answer"), p.bool("ignore_case", false));
            case "regex_match" -> {
                String pattern = p.required("pattern", "{name: regex_match, pattern: '\\\\bdragon\\\\b'}");
                yield pattern == null || !p.compiles("pattern", pattern) ? null
                        : new RewardSpec.RegexMatch(label, pattern, p.bool("ignore_case", false));
            }
            case "numeric_answer" -> new RewardSpec.NumericAnswer(label, p.text("field", "answer"),
                    p.number("tolerance", 1e-6));
            case "length" -> {
                String max = p.required("max", "{name: length, min: 5, max: 40}");
                int min = (int) p.number("min", 0);
                String unit = p.text("unit", "words");
                if (!unit.equals("words") && !unit.equals("chars")) {
                    problems.error(p.at("unit"), "length unit '" + unit + "' is not words or chars", "use unit: words");
                    yield null;
                }
                Double maxValue = max == null ? null : KeyReader.realNumber(params.get("max"));
                if (maxValue == null || maxValue < min) {
                    if (max != null) {
                        problems.error(p.at("max"), "length max must be a number of at least min (" + min + ")",
                                "write e.g. max: 40");
                    }
                    yield null;
                }
                yield new RewardSpec.Length(label, min, maxValue.intValue(), unit);
            }
            case "contains" -> {
                List<String> words = p.strings("words");
                String field = p.text("field", null);
                if (words.isEmpty() == (field == null)) {
                    problems.error(where.where(), "contains needs exactly one of words (a list) or field (the row's "
                            + "field holding the words)", "write e.g. {name: contains, words: [dragon]}");
                    yield null;
                }
                yield new RewardSpec.Contains(label, words, field, p.bool("ignore_case", true));
            }
            case "format" -> {
                String pattern = p.text("pattern", THINK_ANSWER);
                yield p.compiles("pattern", pattern) ? new RewardSpec.Format(label, pattern) : null;
            }
            case "think_format_reward" -> new RewardSpec.Format(label, TRL_THINK_FORMAT);
            default -> throw new IllegalStateException(name);
        };
        p.rejectOthers();
        return spec;
    }

    private String text(YamlNode node, String key) {
        if (node instanceof Scalar s && s.value() != null && !(s.value() instanceof Boolean)) {
            return s.text();
        }
        problems.error(node.where(), key + " must be text, got " + YamlNode.describe(node), "quote it");
        return null;
    }

    /** The parameters of one built-in: typed reads, then everything not read is an error. */
    private final class Params {
        final String name;
        final YamlNode owner;
        final Map<String, YamlNode> values;
        final Set<String> read = new HashSet<>(Set.of("label"));

        Params(String name, YamlNode owner, Map<String, YamlNode> values) {
            this.name = name;
            this.owner = owner;
            this.values = values;
        }

        Object at(String key) {
            YamlNode n = values.get(key);
            return n == null ? owner.where() : n.where();
        }

        String text(String key, String fallback) {
            read.add(key);
            YamlNode n = values.get(key);
            if (n == null) {
                return fallback;
            }
            String v = RewardSpecs.this.text(n, name + "." + key);
            return v == null ? fallback : v;
        }

        String required(String key, String example) {
            String v = text(key, null);
            if (v == null && !values.containsKey(key)) {
                problems.error(owner.where(), "reward function " + name + " needs " + key, "write e.g. " + example);
            }
            return v;
        }

        boolean bool(String key, boolean fallback) {
            read.add(key);
            YamlNode n = values.get(key);
            if (n == null) {
                return fallback;
            }
            if (n instanceof Scalar s && s.value() instanceof Boolean b) {
                return b;
            }
            problems.error(n.where(), name + "." + key + " must be true or false, got " + YamlNode.describe(n),
                    "write " + key + ": true");
            return fallback;
        }

        double number(String key, double fallback) {
            read.add(key);
            YamlNode n = values.get(key);
            if (n == null) {
                return fallback;
            }
            Double v = KeyReader.realNumber(n);
            if (v == null || v < 0) {
                problems.error(n.where(), name + "." + key + " must be a number of at least 0, got "
                        + YamlNode.describe(n), "write e.g. " + key + ": " + KeyReader.fmt(fallback));
                return fallback;
            }
            return v;
        }

        List<String> strings(String key) {
            read.add(key);
            YamlNode n = values.get(key);
            if (n == null) {
                return List.of();
            }
            List<YamlNode> items = n instanceof Sequence s ? s.items() : List.of(n);
            List<String> out = new ArrayList<>();
            for (YamlNode item : items) {
                String v = RewardSpecs.this.text(item, name + "." + key);
                if (v != null && !v.isBlank()) {
                    out.add(v);
                }
            }
            return out;
        }

        boolean compiles(String key, String pattern) {
            try {
                Pattern.compile(pattern);
                return true;
            } catch (PatternSyntaxException e) {
                problems.error(at(key), name + "." + key + " is not a valid regular expression: "
                        + e.getDescription(), "check the pattern (Java regex syntax)");
                return false;
            }
        }

        void rejectOthers() {
            for (Map.Entry<String, YamlNode> e : values.entrySet()) {
                if (!read.contains(e.getKey())) {
                    List<String> allowed = new ArrayList<>(BUILT_INS.get(name));
                    allowed.add("label");
                    String close = Suggestions.closest(e.getKey(), allowed);
                    problems.error(e.getValue().where(), "reward function " + name + " has no parameter '"
                            + e.getKey() + "'", close != null ? "did you mean '" + close + "'?"
                                    : "its parameters: " + String.join(", ", allowed));
                }
            }
        }
    }
}
