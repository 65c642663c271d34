package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Sequence;
import dev.finetune.recipes.model.ModelSource;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The model and how its weights are trained: {@code base_model}, tokenizer and chat-template keys, {@code plugins},
 * {@code adapter} with the {@code lora_*} and 4-bit keys.
 */
final class ModelSection {
    /** Plugins that only change speed or memory use, never the result: accepted with a warning. */
    static final Set<String> HARMLESS_PLUGINS = Set.of("CutCrossEntropyPlugin", "LigerPlugin", "KernelsPlugin",
            "SwanLabPlugin");

    private final Problems problems;
    private final Path recipeDir;
    /** {@code base_model_config} or {@code base_model}, once {@link #model} has read them. */
    private String architectureName;
    /** {@code revision_of_model} when {@link #architectureName} is {@code base_model}. */
    private String architectureRevision;
    /** {@code overrides_of_model_config}, read by {@link #model}: the architecture checks see the model as trained. */
    private Map<String, Object> configOverrides = Map.of();

    ModelSection(Problems problems, Path recipeDir) {
        this.problems = problems;
        this.recipeDir = recipeDir;
    }

    void plugins(KeyReader top) {
        YamlNode n = top.node("plugins");
        if (n instanceof Sequence seq) {
            for (YamlNode item : seq.items()) {
                if (!(item instanceof Scalar s) || !(s.value() instanceof String path)) {
                    continue;
                }
                String name = path.substring(path.lastIndexOf('.') + 1);
                if (!HARMLESS_PLUGINS.contains(name)) {
                    problems.pluginRefused = true;
                    problems.error(item.where(), "plugin '" + name + "' is unsupported: finetune cannot run Axolotl's Python plugins",
                            "remove it from plugins: and the keys it adds");
                }
            }
        }
    }

    Recipe.Model model(KeyReader top) {
        String baseModel = top.string("base_model", null);
        if (baseModel == null || baseModel.isBlank()) {
            problems.error(top.where(), "base_model is required",
                    "add e.g. 'base_model: NousResearch/Llama-3.2-1B' (a hub id or a local model folder)");
        }
        // A local model folder is relative to the recipe file that names it (a base: file's own folder for a
        // base_model it sets), like dataset paths: the recipe can be run from anywhere.
        Path within = top.at("base_model").dir() != null ? top.at("base_model").dir() : recipeDir;
        if (baseModel != null && (DataSection.looksLocal(baseModel) || Files.isDirectory(within.resolve(baseModel)))) {
            Path dir = within.resolve(baseModel).normalize();
            if (!Files.isDirectory(dir)) {
                problems.error(top.at("base_model"), "base_model folder '" + baseModel + "' does not exist (looked at " + dir + ")",
                        "local model paths are relative to the recipe file; or use a hub id such as meta-llama/Llama-3.1-8B");
            }
            baseModel = dir.toString();
        }
        String revision = top.string("revision_of_model", null);
        // model_revision is the name Axolotl's schema reads revision_of_model by (its alias): it picks the commit trained
        String aliasRevision = top.string("model_revision", null);
        if (revision != null && aliasRevision != null) {
            problems.error(top.at("model_revision"), "model_revision and revision_of_model are one setting "
                    + "(model_revision is Axolotl's alias of it), given twice", "keep one of them");
        }
        revision = revision != null ? revision : aliasRevision;
        String baseModelConfig = top.string("base_model_config", null);
        String tokenizerConfig = top.string("tokenizer_config", null);
        boolean trustRemoteCode = top.bool("trust_remote_code");
        if (trustRemoteCode) {
            problems.warn(top.at("trust_remote_code"), "trust_remote_code is ignored: finetune runs no model code from checkpoints",
                    "remove it");
        }
        Map<String, String> specialTokens = new LinkedHashMap<>();
        Mapping st = top.mapping("special_tokens");
        if (st != null) {
            KeyReader r = new KeyReader(st, "special_tokens.", problems);
            for (String k : List.of("bos_token", "eos_token", "pad_token", "unk_token")) {
                String v = r.string(k, null);
                if (v != null) {
                    specialTokens.put(k, v);
                }
            }
            List<String> extra = r.strings("additional_special_tokens", false);
            if (extra != null && !extra.isEmpty()) {
                specialTokens.put("additional_special_tokens", String.join(",", extra));
            }
            r.finish();
        }
        String chatTemplateJinja = top.string("chat_template_jinja", null);
        String chatTemplate = top.string("chat_template", chatTemplateJinja != null ? ChatTemplateNames.JINJA : null);
        // Axolotl's schema takes its names and, beside them, tokenizer_default_fallback_<one of them>
        if (chatTemplate != null && !ChatTemplateNames.AXOLOTL.contains(chatTemplate) && !fallbackNamed(chatTemplate)) {
            String close = Suggestions.closest(chatTemplate, ChatTemplateNames.AXOLOTL);
            problems.error(top.at("chat_template"), "chat_template is '" + chatTemplate + "', which is not one of "
                    + String.join(", ", ChatTemplateNames.AXOLOTL) + ", nor tokenizer_default_fallback_<one of them>",
                    close != null ? "did you mean '" + close + "'?" : "use one of those");
            problems.invalid.add("chat_template");
            chatTemplate = null;
        }
        ChatTemplateNames.refuseUnshipped(chatTemplate, top.at("chat_template"), problems);
        if (ChatTemplateNames.JINJA.equals(chatTemplate) && chatTemplateJinja == null) {
            problems.error(top.at("chat_template"), "chat_template: jinja needs chat_template_jinja",
                    "add chat_template_jinja: with the template text or a file path");
        }
        for (String key : List.of("model_type", "type_of_model")) {
            String modelClass = top.string(key, null);
            // what Axolotl instantiates: a sequence classifier or another head is a different training altogether
            if (modelClass != null && !modelClass.endsWith("ForCausalLM")) {
                problems.error(top.at(key), key + " " + modelClass + " is unsupported: finetune trains causal language "
                        + "models (...ForCausalLM)", "remove " + key + " (or write AutoModelForCausalLM)");
            }
        }
        List<String> eot = top.strings("eot_tokens", false);
        Mapping kwargs = top.mapping("chat_template_kwargs");
        String defaultSystemMessage = top.string("default_system_message", null);
        this.configOverrides = configOverrides(top);
        this.architectureName = baseModelConfig != null ? baseModelConfig : baseModel;
        this.architectureRevision = baseModelConfig != null ? null : revision;
        if (top.bool("resize_token_embeddings_to_32x")) {
            requireEmbeddingsAMultipleOf32(top.at("resize_token_embeddings_to_32x"));
        }
        return new Recipe.Model(baseModel, baseModelConfig, tokenizerConfig, trustRemoteCode, Map.copyOf(specialTokens),
                chatTemplate, chatTemplateJinja, eot == null ? List.of() : eot, templateVariables(kwargs),
                defaultSystemMessage, revision, configOverrides);
    }

    /**
     * {@code overrides_of_model_config}, or {@code model_config}: the name Axolotl's schema reads it by (its alias),
     * the one most recipes write. Both at once would be one setting given twice.
     */
    private Map<String, Object> configOverrides(KeyReader top) {
        Mapping named = top.mapping("overrides_of_model_config");
        Mapping alias = top.mapping("model_config");
        if (named != null && alias != null) {
            problems.error(top.at("model_config"), "model_config and overrides_of_model_config are one setting "
                    + "(model_config is Axolotl's alias of it), given twice", "keep one of them");
        }
        Mapping given = named != null ? named : alias;
        if (given == null) {
            return Map.of();
        }
        for (YamlNode.Entry e : given.entries().values()) {
            // where each overridden key is written: a refusal of one points at its line
            problems.written("overrides_of_model_config." + e.key(), e.keyWhere());
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> values = (Map<String, Object>) YamlNode.plain(given);
        return java.util.Collections.unmodifiableMap(new LinkedHashMap<>(values));
    }

    /**
     * {@code chat_template_kwargs} as the variables a template reads ({@code enable_thinking: false}); the names the
     * renderer sets itself cannot be overridden this way.
     */
    private Map<String, Object> templateVariables(Mapping kwargs) {
        if (kwargs == null) {
            return Map.of();
        }
        for (var e : kwargs.entries().values()) {
            if (RESERVED_TEMPLATE_VARIABLES.contains(e.key())) {
                problems.error(e.keyWhere(), "chat_template_kwargs." + e.key() + " is set by finetune for every rendering",
                        "remove it; " + (e.key().equals("tools") ? "tools come from the dataset's field_tools"
                                : e.key().equals("messages") ? "messages come from the dataset" : "it is not a template option"));
            }
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> variables = (Map<String, Object>) YamlNode.plain(kwargs);
        return variables;
    }

    private static final Set<String> RESERVED_TEMPLATE_VARIABLES = Set.of("messages", "add_generation_prompt", "tools",
            "bos_token", "eos_token", "pad_token", "unk_token");

    AdapterSpec adapter(KeyReader top) {
        String adapter = top.string("adapter", null);
        boolean in4 = Boolean.TRUE.equals(top.bool("load_in_4bit"));
        boolean in8 = Boolean.TRUE.equals(top.bool("load_in_8bit"));
        Integer r = top.integer("lora_r", null, 1);
        Double alpha = top.number("lora_alpha", null, Double.MIN_VALUE, Double.MAX_VALUE);
        Double dropout = top.number("lora_dropout", 0.0, 0.999);
        List<String> targets = top.strings("lora_target_modules", true);
        Boolean targetLinear = top.bool("lora_target_linear", null);
        Boolean fanInFanOut = top.bool("lora_fan_in_fan_out");
        boolean rslora = top.bool("peft_use_rslora");
        Mapping bnb = top.mapping("bnb_config_kwargs");
        KeyReader b = new KeyReader(bnb != null ? bnb : new Mapping(Map.of(), top.where()), "bnb_config_kwargs.",
                problems);
        boolean doubleQuant = b.bool("bnb_4bit_use_double_quant");
        b.choice("bnb_4bit_quant_type", null, List.of("nf4"));
        b.finish();
        YamlNode.Where unfrozen = top.unsupportedSet("unfrozen_parameters");
        if (unfrozen != null) {
            // the way out differs: a full fine-tune drops the key to train every weight; an adapter recipe (Axolotl's
            // gemma3 QLoRA examples) already keeps the base frozen, so "use adapter: lora" would be no advice
            problems.error(unfrozen, "'unfrozen_parameters' is unsupported: "
                    + RecipeKeys.get("unfrozen_parameters").note(), adapter == null
                            ? "remove it for a full fine-tune (every weight trains), or use adapter: lora (the base "
                                    + "weights stay frozen and the adapter alone trains)"
                            : "remove it: with adapter: " + adapter + " the base weights stay frozen and the adapter "
                                    + "alone trains");
        }
        if (in8) {
            problems.error(top.at("load_in_8bit"), "load_in_8bit is unsupported: finetune stores frozen weights in NF4 only",
                    "use adapter: qlora with load_in_4bit: true (or adapter: lora without quantization)");
        }
        if (adapter == null) {
            // The values as read: a key whose value was refused is reported already and reads as absent.
            Map<String, Object> given = new LinkedHashMap<>();
            given.put("lora_r", r);
            given.put("lora_alpha", alpha);
            given.put("lora_target_modules", targets);
            given.put("lora_target_linear", targetLinear);
            List<String> loraKeys = given.entrySet().stream().filter(e -> e.getValue() != null).map(Map.Entry::getKey).toList();
            if (!loraKeys.isEmpty()) {
                problems.error(top.at(loraKeys.get(0)), String.join(", ", loraKeys)
                                + " set but no adapter: without 'adapter' this is a full fine-tune and LoRA keys have no effect",
                        "add 'adapter: lora' (or remove the lora_* keys for a full fine-tune)");
            }
            if (in4) {
                problems.error(top.at("load_in_4bit"), "load_in_4bit needs an adapter: 4-bit weights cannot be trained directly",
                        "add 'adapter: qlora'");
            }
            return new AdapterSpec.Full();
        }
        AdapterType type = AdapterType.of(adapter);
        if (type == null) {
            if (adapter.equals("llama-adapter")) {
                problems.error(top.at("adapter"), "adapter: llama-adapter is unsupported", "use adapter: lora");
            } else {
                String close = Suggestions.closest(adapter, AdapterType.keys());
                problems.error(top.at("adapter"), "adapter is '" + adapter + "', which is neither lora nor qlora",
                        close != null ? "did you mean '" + close + "'?" : "use adapter: lora or adapter: qlora, or remove it for a full fine-tune");
            }
            return new AdapterSpec.Full();
        }
        if (type == AdapterType.QLORA && !in4) {
            problems.error(top.at("adapter"), "adapter: qlora needs load_in_4bit: true (the base weights are stored as NF4)",
                    "add 'load_in_4bit: true', or use adapter: lora");
        }
        if (type == AdapterType.LORA && in4) {
            problems.warn(top.at("load_in_4bit"), "adapter: lora with load_in_4bit: true is QLoRA",
                    "write adapter: qlora to say so");
        }
        if (r == null && !top.refused("lora_r")) {
            problems.error(top.at("adapter"), "adapter: " + adapter + " needs lora_r (the adapter rank)", "add e.g. 'lora_r: 16'");
        }
        if (alpha == null && !top.refused("lora_alpha")) {
            problems.error(top.at("adapter"), "adapter: " + adapter + " needs lora_alpha (scale = alpha / r)",
                    "add e.g. 'lora_alpha: 32' (commonly 2 x lora_r)");
        }
        boolean linear = Boolean.TRUE.equals(targetLinear);
        // lora_target_parameters (MoE experts) is reported as unsupported on its own; no second error for it here.
        if ((targets == null || targets.isEmpty()) && !linear && !top.has("lora_target_modules")
                && !top.has("lora_target_parameters")) {
            problems.error(top.at("adapter"), "adapter: " + adapter + " has no target modules",
                    "add 'lora_target_linear: true' or 'lora_target_modules: [q_proj, k_proj, v_proj, o_proj]'");
        }
        if (targets != null) {
            for (String t : targets) {
                try {
                    java.util.regex.Pattern.compile(t);
                } catch (java.util.regex.PatternSyntaxException e) {
                    problems.error(top.at("lora_target_modules"), "lora_target_modules entry '" + t + "' is not a valid regex",
                            "write a module name such as q_proj");
                }
            }
        }
        if (targets != null && !targets.isEmpty()) {
            requireTargetsExist(top, targets);
        }
        if (Boolean.TRUE.equals(fanInFanOut)) {
            problems.error(top.at("lora_fan_in_fan_out"), "lora_fan_in_fan_out: true is unsupported (Llama-family weights are not transposed)",
                    "remove it");
        }
        AdapterSpec.Nf4 quant = in4 ? new AdapterSpec.Nf4(64, doubleQuant) : null;
        return new AdapterSpec.Lora(r == null ? 8 : r, alpha == null ? 16 : alpha, dropout == null ? 0 : dropout,
                targets == null ? List.of() : targets, linear, rslora, quant);
    }


    /**
     * When the architecture is known (a local config.json or the built-in table), every target name must name one of
     * its modules: a misspelt entry would otherwise leave that projection without an adapter, silently.
     */
    private void requireTargetsExist(KeyReader top, List<String> targets) {
        if (architectureName == null || architectureName.isBlank()) {
            return;
        }
        ModelSource source;
        try {
            source = ModelSource.resolve(architectureName, architectureRevision, recipeDir, null, configOverrides);
        } catch (UserError e) {
            return; // an unreadable config.json is the model loader's error to report, with its own message
        }
        if (!(source instanceof ModelSource.Found found)) {
            requireTargetsOfSomeFamily(top, targets);
            return;
        }
        List<String> modules = found.config().parameters().linearModules();
        List<String> linears = List.copyOf(LoraTargets.shortNames(modules));
        for (LoraTargets.Unmatched u : LoraTargets.of(targets).unmatched(modules)) {
            Object where = top.at("lora_target_modules");
            problems.error(where, u.message(found.config().modelType() + " model (" + found.from() + ")"), u.hint(linears));
        }
    }

    /**
     * Without the model's config.json (a hub model neither cached nor in the built-in table) its modules are unknown,
     * but a plain module name that no family finetune trains has cannot be matched whatever the config says: the run
     * would refuse it, either as a target it lacks or as an architecture finetune does not train (Axolotl's MPT
     * examples name {@code Wqkv}). Regexes are left to the run: they may name layers by index.
     */
    private void requireTargetsOfSomeFamily(KeyReader top, List<String> targets) {
        java.util.SortedSet<String> known = dev.finetune.recipes.model.Family.linearNames();
        List<String> foreign = targets.stream().filter(t -> t.matches("[A-Za-z0-9_]+") && !known.contains(t))
                .toList();
        if (!foreign.isEmpty()) {
            problems.error(top.at("lora_target_modules"), "lora_target_modules " + String.join(", ", foreign)
                    + (foreign.size() == 1 ? " names" : " name") + " no linear layer of any architecture finetune "
                    + "trains (" + dev.finetune.recipes.model.Family.supportedList() + "): a model with such layers "
                    + "is unsupported, and the run would refuse it whatever " + architectureName + "'s config.json "
                    + "says", "those architectures name their linear layers " + String.join(", ", known));
        }
    }

    /**
     * {@code resize_token_embeddings_to_32x}: Axolotl grows the embedding (and head) to the tokenizer's size rounded up
     * to a multiple of 32, when it has fewer rows; the new rows are logits every softmax sees. finetune adds no tokens,
     * so with a {@code vocab_size} that is a multiple of 32 Axolotl changes nothing either and the key is accepted; any
     * other model would train with rows finetune does not add, and is refused. A hub model's config.json that is not
     * in the cache yet is read when the run fetches it, before any weight (see the run's second validation).
     */
    private void requireEmbeddingsAMultipleOf32(Object where) {
        ModelSource source = null;
        try {
            source = architectureName == null || architectureName.isBlank() ? null
                    : ModelSource.resolve(architectureName, architectureRevision, recipeDir, null, configOverrides);
        } catch (UserError e) {
            // an unreadable config.json is the model loader's error to report, with its own message
        }
        if (!(source instanceof ModelSource.Found found)) {
            // only the hub has the config.json: the run fetches it before anything else and validates again
            problems.warn(where, "resize_token_embeddings_to_32x: true is checked when the run fetches the model's "
                    + "config.json: finetune resizes no embeddings, so the run refuses it unless vocab_size is a "
                    + "multiple of 32 (where Axolotl's resize changes nothing)", "run 'finetune download "
                    + architectureName + "' to have validate read its config.json now");
            return;
        }
        int vocab = found.config().vocabSize();
        if (vocab % 32 != 0) {
            problems.error(where, "resize_token_embeddings_to_32x: true is unsupported for this model: its vocab_size "
                    + vocab + " (" + found.from() + ") is not a multiple of 32, and Axolotl would add up to "
                    + (32 - vocab % 32) + " embedding rows that finetune does not (the softmax would differ)",
                    "remove it: finetune trains the model's own " + vocab + " rows");
        }
    }

    /** {@code tokenizer_default_fallback_<name>} with one of Axolotl's template names after the prefix. */
    private static boolean fallbackNamed(String text) {
        return text.startsWith(ChatTemplateNames.FALLBACK_PREFIX)
                && ChatTemplateNames.AXOLOTL.contains(text.substring(ChatTemplateNames.FALLBACK_PREFIX.length()));
    }
}
