package dev.finetune.cli;

import dev.finetune.recipes.model.Family;
import dev.finetune.recipes.model.KnownModels;
import dev.finetune.recipes.model.ModelConfig;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.regex.Pattern;

/**
 * Which of finetune's families an Axolotl recipe's model belongs to, without its weights or its config.json: the
 * built-in table's config where it knows the model (what {@code validate} itself reads), else the transformers class
 * the recipe names in {@code model_type}, else the hub name. The name rules are deliberately narrow: a name that also
 * fits a vision-language or a differently built sibling (Gemma 3 4B and up, Qwen3-Next, Qwen3.5, Llama 4, Mistral 3)
 * stays unplaced rather than counted under the wrong family.
 */
final class CorpusFamilies {
    /** How the family was decided, for the printed list. */
    record Placement(Family family, String how) {}

    private record Rule(Pattern name, Family family) {}

    /** Names that fit a supported family's pattern but are another architecture: vision towers, Llama 4. */
    private static final Pattern NOT_TEXT = Pattern.compile("vision|llava|-vl-|pixtral|voxtral");

    /** First match wins: the mixtures of experts before their dense siblings. */
    private static final List<Rule> RULES = List.of(
            rule("mixtral", Family.MIXTRAL),
            rule("qwen1\\.5-moe|qwen2-moe|qwen2-57b-a14b", Family.QWEN2_MOE),
            rule("^qwen3-\\d+b-a\\d+b", Family.QWEN3_MOE),
            rule("^qwen3-\\d", Family.QWEN3),
            rule("^qwen2(\\.5)?-\\d", Family.QWEN2),
            rule("^gemma-2-", Family.GEMMA2),
            rule("^gemma-3-(270m|1b)", Family.GEMMA3),
            rule("^phi-3|^phi-4", Family.PHI3),
            rule("^olmo-3", Family.OLMO3),
            rule("^olmo-2", Family.OLMO2),
            rule("^olmo-\\d+b", Family.OLMO),
            rule("^granite-3", Family.GRANITE),
            rule("^mistral-7b|^ministral-8b", Family.MISTRAL),
            rule("^(meta-)?llama-?[23]\\b|^llama-\\d+b|^(tiny|code|open_)llama|^smollm2?-|^yi-\\d", Family.LLAMA));

    private CorpusFamilies() {}

    private static Rule rule(String regex, Family family) {
        return new Rule(Pattern.compile(regex), family);
    }

    /** The family of the recipe's {@code base_model}, or empty when none of the three sources places it. */
    static Optional<Placement> place(Map<String, Object> recipe) {
        if (!(recipe.get("base_model") instanceof String model)) {
            return Optional.empty();
        }
        Optional<Family> known = KnownModels.lookup(model).map(ModelConfig::family);
        if (known.isPresent()) {
            return Optional.of(new Placement(known.get(), "built-in table"));
        }
        if (recipe.get("model_type") instanceof String type && type.endsWith("ForCausalLM")) {
            String stem = type.substring(0, type.length() - "ForCausalLM".length()).toLowerCase(Locale.ROOT);
            // Gemma3ForCausalLM is the text model, model_type gemma3_text; the others drop only the underscore
            Optional<Family> byClass = Arrays.stream(Family.values())
                    .filter(f -> f.modelType().replace("_text", "").replace("_", "").equals(stem)).findFirst();
            if (byClass.isPresent()) {
                return Optional.of(new Placement(byClass.get(), "model_type " + type));
            }
        }
        String name = model.substring(model.lastIndexOf('/') + 1).toLowerCase(Locale.ROOT);
        if (NOT_TEXT.matcher(name).find()) {
            return Optional.empty();
        }
        return RULES.stream().filter(r -> r.name().matcher(name).find()).findFirst()
                .map(r -> new Placement(r.family(), "name"));
    }
}
