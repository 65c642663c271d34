package dev.finetune.recipes;

import dev.finetune.recipes.KeyReader.Problems;
import dev.finetune.recipes.Recipe.Flag;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Sequence;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * Turns a merged recipe tree into a {@link Recipe}: each supported key is read here and nowhere else, with its
 * type check, Axolotl's default and the cross-key rules of research/axolotl.md §2 that involve it.
 */
final class RecipeReader {

    static final List<String> CHAT_TEMPLATES = List.of("alpaca", "chatml", "mistral_v1", "mistral_v2v3",
            "mistral_v3_tekken", "mistral_v7_tekken", "gemma", "cohere", "llama3", "llama3_2_vision", "llama4", "phi_3",
            "phi_35", "deepseek_v2", "deepseek_v3", "jamba", "jinja", "qwen_25", "qwen3", "qwen3_5", "falcon_h1",
            "nemotron_h", "tokenizer_default", "exaone", "exaone4", "metharme", "pixtral", "llava", "qwen2_vl", "gemma3",
            "gemma3n", "gemma4", "gemma4_unified", "command_a", "command_a_tool_use", "command_a_rag", "aya");
    static final List<String> SCHEDULERS = List.of("cosine", "linear", "constant", "constant_with_warmup");
    static final Set<String> OTHER_SCHEDULERS = Set.of("cosine_with_restarts", "polynomial", "inverse_sqrt",
            "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay",
            "one_cycle", "rex");
    static final Set<String> OTHER_OPTIMIZERS = Set.of("adamw_torch_xla", "adamw_torch_npu_fused", "adamw_apex_fused",
            "adafactor", "adamw_anyprecision", "ademamix", "adagrad", "ademamix_8bit", "lion_8bit", "lion_32bit",
            "paged_ademamix_32bit", "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit", "rmsprop",
            "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit", "galore_adamw", "galore_adamw_8bit",
            "galore_adafactor", "galore_adamw_layerwise", "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise",
            "lomo", "adalomo", "grokadamw", "schedule_free_radam", "schedule_free_adamw", "schedule_free_sgd",
            "apollo_adamw", "apollo_adamw_layerwise", "stable_adamw", "optimi_adamw", "ao_adamw_4bit", "ao_adamw_8bit",
            "ao_adamw_fp8", "adopt_adamw", "came_pytorch", "muon", "dion", "sinkgd", "flash_adamw", "flash_adam",
            "flash_sgd", "flash_sgdw", "flash_lion", "q_galore_adamw8bit");
    static final List<String> RL_SUPPORTED = List.of("dpo", "grpo");
    static final Set<String> RL_OTHER = Set.of("kto", "orpo", "simpo", "gdpo", "ebft");
    /** Plugins that only change speed or memory use, never the result: accepted with a warning. */
    static final Set<String> HARMLESS_PLUGINS = Set.of("CutCrossEntropyPlugin", "LigerPlugin", "KernelsPlugin",
            "SwanLabPlugin");

    private final Problems problems;
    private final Path recipeDir;

    private RecipeReader(Problems problems, Path recipeDir) {
        this.problems = problems;
        this.recipeDir = recipeDir;
    }

    /** Reads the whole tree; problems land in {@code problems}, the recipe is returned even when some are errors. */
    static Recipe read(Mapping tree, Path recipeDir, Problems problems) {
        return new RecipeReader(problems, recipeDir).read(tree);
    }

    private Recipe read(Mapping tree) {
        KeyReader top = new KeyReader(tree, "", problems);
        plugins(top);
        Recipe.Model model = model(top);
        Recipe.Objective objective = objective(top);
        AdapterSpec adapter = adapter(top);
        Recipe.Data data = data(top, objective);
        if (objective == null) {
            objective = new Recipe.Objective.Sft();
        }
        Recipe.Batch batch = new Recipe.Batch(
                top.integer("micro_batch_size", null, 1),
                top.integer("gradient_accumulation_steps", null, 1),
                top.integer("batch_size", null, 1),
                top.integer("eval_batch_size", null, 1));
        Recipe.Training training = training(top, objective);
        Recipe.Precision precision = precision(top);
        Recipe.Hardware hardware = hardware(top);
        Recipe.Distributed distributed = distributed(top, training, adapter, objective);
        Recipe.Backend backend = backend(top, hardware, distributed);
        Recipe.Output output = output(top, data);
        top.finish();
        if (precision.bf16() == Flag.TRUE && hardware instanceof Recipe.Hardware.Cpu) {
            problems.warn(top.at("bf16"), "bf16 has no effect on CPU: training computes in float32 there",
                    "set bf16: auto to silence this warning");
        }
        return new Recipe(model, adapter, data, training, batch, precision, objective, distributed, hardware, backend,
                output);
    }

    private void plugins(KeyReader top) {
        YamlNode n = top.node("plugins");
        if (n instanceof Sequence seq) {
            for (YamlNode item : seq.items()) {
                if (!(item instanceof Scalar s) || !(s.value() instanceof String path)) {
                    continue;
                }
                String name = path.substring(path.lastIndexOf('.') + 1);
                if (!HARMLESS_PLUGINS.contains(name)) {
                    problems.error(item.where(), "plugin '" + name + "' is unsupported: finetune cannot run Axolotl's Python plugins",
                            "remove it from plugins: and the keys it adds");
                }
            }
        }
    }

    private Recipe.Model model(KeyReader top) {
        String baseModel = top.string("base_model", null);
        if (baseModel == null || baseModel.isBlank()) {
            problems.error(top.where(), "base_model is required",
                    "add e.g. 'base_model: NousResearch/Llama-3.2-1B' (a hub id or a local model folder)");
        }
        if (baseModel != null && (looksLocal(baseModel) || Files.isDirectory(recipeDir.resolve(baseModel)))) {
            // A local model folder is relative to the recipe, like dataset paths: the recipe can be run from anywhere.
            Path dir = recipeDir.resolve(baseModel).normalize();
            if (!Files.isDirectory(dir)) {
                problems.error(top.at("base_model"), "base_model folder '" + baseModel + "' does not exist (looked at " + dir + ")",
                        "local model paths are relative to the recipe file; or use a hub id such as meta-llama/Llama-3.1-8B");
            }
            baseModel = dir.toString();
        }
        String baseModelConfig = top.string("base_model_config", null);
        String tokenizerConfig = top.string("tokenizer_config", null);
        boolean trustRemoteCode = top.bool("trust_remote_code", false);
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
        String chatTemplate = top.choice("chat_template", chatTemplateJinja != null ? "jinja" : null, CHAT_TEMPLATES);
        if ("jinja".equals(chatTemplate) && chatTemplateJinja == null) {
            problems.error(top.at("chat_template"), "chat_template: jinja needs chat_template_jinja",
                    "add chat_template_jinja: with the template text or a file path");
        }
        List<String> eot = top.strings("eot_tokens", false);
        return new Recipe.Model(baseModel, baseModelConfig, tokenizerConfig, trustRemoteCode, Map.copyOf(specialTokens),
                chatTemplate, chatTemplateJinja, eot == null ? List.of() : eot);
    }

    private AdapterSpec adapter(KeyReader top) {
        String adapter = top.string("adapter", null);
        boolean in4 = Boolean.TRUE.equals(top.bool("load_in_4bit", false));
        boolean in8 = Boolean.TRUE.equals(top.bool("load_in_8bit", false));
        Integer r = top.integer("lora_r", null, 1);
        Double alpha = top.number("lora_alpha", null, Double.MIN_VALUE, Double.MAX_VALUE);
        Double dropout = top.number("lora_dropout", 0.0, 0.0, 0.999);
        List<String> targets = top.strings("lora_target_modules", true);
        Boolean targetLinear = top.bool("lora_target_linear", null);
        Boolean fanInFanOut = top.bool("lora_fan_in_fan_out", false);
        boolean rslora = top.bool("peft_use_rslora", false);
        Mapping bnb = top.mapping("bnb_config_kwargs");
        boolean doubleQuant = true;
        if (bnb != null) {
            KeyReader b = new KeyReader(bnb, "bnb_config_kwargs.", problems);
            doubleQuant = b.bool("bnb_4bit_use_double_quant", true);
            b.choice("bnb_4bit_quant_type", "nf4", List.of("nf4"));
            b.string("bnb_4bit_compute_dtype", null);
            b.string("bnb_4bit_quant_storage", null);
            b.finish();
        }
        if (in8) {
            problems.error(top.at("load_in_8bit"), "load_in_8bit is unsupported: finetune stores frozen weights in NF4 only",
                    "use adapter: qlora with load_in_4bit: true (or adapter: lora without quantization)");
        }
        if (adapter == null) {
            List<String> loraKeys = new ArrayList<>();
            for (String k : List.of("lora_r", "lora_alpha", "lora_target_modules", "lora_target_linear")) {
                if (top.has(k)) {
                    loraKeys.add(k);
                }
            }
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
        if (!adapter.equals("lora") && !adapter.equals("qlora")) {
            if (adapter.equals("llama-adapter")) {
                problems.error(top.at("adapter"), "adapter: llama-adapter is unsupported", "use adapter: lora");
            } else {
                String close = Suggestions.closest(adapter, List.of("lora", "qlora"));
                problems.error(top.at("adapter"), "adapter is '" + adapter + "', which is neither lora nor qlora",
                        close != null ? "did you mean '" + close + "'?" : "use adapter: lora or adapter: qlora, or remove it for a full fine-tune");
            }
            return new AdapterSpec.Full();
        }
        if (adapter.equals("qlora") && !in4) {
            problems.error(top.at("adapter"), "adapter: qlora needs load_in_4bit: true (the base weights are stored as NF4)",
                    "add 'load_in_4bit: true', or use adapter: lora");
        }
        if (adapter.equals("lora") && in4) {
            problems.warn(top.at("load_in_4bit"), "adapter: lora with load_in_4bit: true is QLoRA",
                    "write adapter: qlora to say so");
        }
        if (r == null && !top.has("lora_r")) {
            problems.error(top.at("adapter"), "adapter: " + adapter + " needs lora_r (the adapter rank)", "add e.g. 'lora_r: 16'");
        }
        if (alpha == null && !top.has("lora_alpha")) {
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
        if (Boolean.TRUE.equals(fanInFanOut)) {
            problems.error(top.at("lora_fan_in_fan_out"), "lora_fan_in_fan_out: true is unsupported (Llama-family weights are not transposed)",
                    "remove it");
        }
        AdapterSpec.Nf4 quant = in4 ? new AdapterSpec.Nf4(64, doubleQuant) : null;
        return new AdapterSpec.Lora(r == null ? 8 : r, alpha == null ? 16 : alpha, dropout == null ? 0 : dropout,
                targets == null ? List.of() : targets, linear, rslora, quant);
    }

    private Recipe.Objective objective(KeyReader top) {
        String rl = top.string("rl", null);
        Double rlBeta = top.number("rl_beta", null, 0, Double.MAX_VALUE);
        double labelSmoothing = top.number("dpo_label_smoothing", 0.0, 0, 0.5);
        boolean precompute = top.bool("precompute_ref_log_probs", false);
        List<String> lossTypes = top.strings("dpo_loss_type", true);
        Mapping trlMap = top.mapping("trl");
        KeyReader trl = new KeyReader(trlMap == null ? new Mapping(Map.of(), top.where()) : trlMap, "trl.", problems);
        Double trlBeta = trl.number("beta", null, 0, Double.MAX_VALUE);
        if (rlBeta != null && trlBeta != null && !rlBeta.equals(trlBeta)) {
            problems.error(trl.at("beta"), "trl.beta (" + KeyReader.fmt(trlBeta) + ") and rl_beta (" + KeyReader.fmt(rlBeta)
                    + ") disagree", "keep only one of them");
        }
        Double beta = rlBeta != null ? rlBeta : trlBeta;
        Integer numGenerations = trl.integer("num_generations", null, 2);
        Integer generationBatch = trl.integer("generation_batch_size", null, 1);
        Integer maxCompletion = trl.integer("max_completion_length", 256, 1);
        Double temperature = trl.number("temperature", 1.0, Double.MIN_VALUE, Double.MAX_VALUE);
        Double epsilon = trl.number("epsilon", 0.2, 0, 1);
        YamlNode rewardNode = trl.node("reward_funcs");
        List<RewardSpec> rewardFuncs = rewardNode == null ? null : RewardSpecs.read(rewardNode, recipeDir, problems);
        YamlNode weightsNode = trl.node("reward_weights");
        boolean scaleRewards = trl.bool("scale_rewards", true);
        boolean useVllm = trl.bool("use_vllm", false);
        trl.finish();
        if (rl == null) {
            if (trlMap != null && !trlMap.entries().isEmpty()) {
                problems.warn(top.at("trl"), "trl: has no effect without rl", "add rl: dpo or rl: grpo, or remove trl:");
            }
            return new Recipe.Objective.Sft();
        }
        if (rl.equals("ipo")) {
            problems.warn(top.at("rl"), "rl: ipo is deprecated in Axolotl", "write rl: dpo with dpo_loss_type: [ipo]");
            if (lossTypes == null) {
                lossTypes = List.of("ipo");
            }
            rl = "dpo";
        }
        if (RL_OTHER.contains(rl)) {
            problems.error(top.at("rl"), "rl: " + rl + " is unsupported: finetune trains sft, dpo and grpo",
                    rl.equals("ipo") ? "use rl: dpo" : "use rl: dpo (preference pairs) or rl: grpo (reward functions)");
            return null;
        }
        if (!RL_SUPPORTED.contains(rl)) {
            String close = Suggestions.closest(rl, List.of("dpo", "grpo", "ipo", "kto", "orpo", "simpo", "gdpo", "ebft"));
            problems.error(top.at("rl"), "rl is '" + rl + "', which is not an objective Axolotl knows",
                    close != null ? "did you mean '" + close + "'?" : "use rl: dpo or rl: grpo, or remove rl for SFT");
            return null;
        }
        if (rl.equals("dpo")) {
            String lossType = "sigmoid";
            if (lossTypes != null && !lossTypes.isEmpty()) {
                lossType = lossTypes.get(0);
                if (lossTypes.size() > 1 || !List.of("sigmoid", "ipo").contains(lossType)) {
                    problems.error(top.at("dpo_loss_type"), "dpo_loss_type " + lossTypes + " is unsupported: finetune "
                            + "trains one loss, sigmoid or ipo", "write dpo_loss_type: [sigmoid] or [ipo]");
                }
            }
            if (lossType.equals("ipo") && beta != null && beta == 0) {
                problems.error(top.at(rlBeta != null ? "rl_beta" : "trl"), "the ipo loss needs beta > 0 (it targets "
                        + "a margin of 1/(2 beta))", "use e.g. rl_beta: 0.1");
            }
            return new Recipe.Objective.Dpo(beta == null ? 0.1 : beta, labelSmoothing, precompute, lossType);
        }
        if (lossTypes != null) {
            problems.error(top.at("dpo_loss_type"), "dpo_loss_type only applies to rl: dpo", "remove it");
        }
        if (useVllm) {
            problems.error(trl.at("use_vllm"), "trl.use_vllm is unsupported: finetune generates GRPO completions in the trainer",
                    "remove trl.use_vllm");
        }
        if (rewardFuncs == null || rewardFuncs.isEmpty()) {
            problems.error(trlMap == null ? top.at("rl") : trl.at("reward_funcs"), "rl: grpo needs trl.reward_funcs",
                    "add e.g. 'trl: {reward_funcs: [exact_match]}'");
        }
        List<Double> weights = new ArrayList<>();
        if (weightsNode instanceof Sequence seq) {
            for (YamlNode w : seq.items()) {
                Double v = KeyReader.realNumber(w);
                if (v == null) {
                    problems.error(w.where(), "trl.reward_weights items must be numbers, got " + YamlNode.describe(w),
                            "write e.g. reward_weights: [1.0, 0.5]");
                } else {
                    weights.add(v);
                }
            }
            if (rewardFuncs != null && weights.size() != rewardFuncs.size() && weights.size() == seq.items().size()) {
                problems.error(weightsNode.where(), "trl.reward_weights has " + weights.size() + " weights for "
                        + rewardFuncs.size() + " reward functions", "give one weight per reward function");
            }
        } else if (weightsNode != null) {
            problems.error(weightsNode.where(), "trl.reward_weights must be a list, got " + YamlNode.describe(weightsNode),
                    "write e.g. reward_weights: [1.0]");
        }
        return new Recipe.Objective.Grpo(numGenerations == null ? 8 : numGenerations, generationBatch, maxCompletion,
                temperature, beta == null ? 0.0 : beta, epsilon, rewardFuncs == null ? List.of() : rewardFuncs,
                List.copyOf(weights), scaleRewards, useVllm);
    }

    private Recipe.Data data(KeyReader top, Recipe.Objective objective) {
        List<DatasetSpec> datasets = datasets(top, "datasets", objective);
        List<DatasetSpec> tests = datasets(top, "test_datasets", objective);
        if (datasets == null && !top.has("datasets") && !top.has("pretraining_dataset")) {
            problems.error(top.where(), "datasets is required", "add e.g. 'datasets: [{path: data/train.jsonl, type: alpaca}]'");
        }
        double valSetSize = top.number("val_set_size", 0.0, 0, 0.999);
        if (valSetSize > 0 && tests != null && !tests.isEmpty()) {
            problems.error(top.at("val_set_size"), "val_set_size and test_datasets both define evaluation data",
                    "set val_set_size: 0 or remove test_datasets");
        }
        String prepared = top.string("dataset_prepared_path", null);
        boolean trainOnInputs = top.bool("train_on_inputs", false);
        String excess = top.choice("excess_length_strategy", "drop", List.of("drop", "truncate", "raise"));
        boolean skipInvalidRows = top.bool("dataset_skip_invalid_rows", false);
        return new Recipe.Data(datasets == null ? List.of() : datasets, tests == null ? List.of() : tests, valSetSize,
                prepared, trainOnInputs, Recipe.ExcessLength.valueOf(excess.toUpperCase(java.util.Locale.ROOT)), skipInvalidRows);
    }

    private List<DatasetSpec> datasets(KeyReader top, String key, Recipe.Objective objective) {
        YamlNode n = top.node(key);
        if (n == null) {
            return null;
        }
        List<YamlNode> items;
        if (n instanceof Sequence seq) {
            items = seq.items();
        } else if (n instanceof Mapping) {
            items = List.of(n);
        } else {
            problems.error(n.where(), key + " must be a list of datasets, got " + YamlNode.describe(n),
                    "write '" + key + ":' then '  - path: data/train.jsonl' and '    type: alpaca'");
            return null;
        }
        if (items.isEmpty()) {
            problems.error(n.where(), key + " is an empty list", "add at least one '- path: ...' entry");
        }
        List<DatasetSpec> out = new ArrayList<>();
        for (YamlNode item : items) {
            if (!(item instanceof Mapping m)) {
                problems.error(item.where(), "each entry of " + key + " must be a mapping with path and type, got "
                        + YamlNode.describe(item), "write '- path: data/train.jsonl' and '  type: alpaca'");
                continue;
            }
            DatasetSpec spec = dataset(m, key, objective);
            if (spec != null) {
                out.add(spec);
            }
        }
        return out;
    }

    private DatasetSpec dataset(Mapping m, String listKey, Recipe.Objective objective) {
        KeyReader r = new KeyReader(m, "datasets[].", problems);
        String path = r.string("path", null);
        YamlNode typeNode = r.node("type");
        String split = r.string("split", "train");
        r.string("name", null);
        r.node("data_files");
        r.string("ds_type", null);
        String field = r.string("field", null);
        String fieldMessages = r.string("field_messages", null);
        Map<String, String> mappings = new LinkedHashMap<>();
        Mapping pm = r.mapping("message_property_mappings");
        if (pm != null) {
            for (var e : pm.entries().values()) {
                if (e.value() instanceof Scalar s && s.value() instanceof String v) {
                    mappings.put(e.key(), v);
                } else {
                    problems.error(e.value().where(), "message_property_mappings." + e.key() + " must name a field",
                            "write e.g. 'role: from'");
                }
            }
        }
        String oldRole = r.string("message_field_role", null);
        String oldContent = r.string("message_field_content", null);
        if (oldRole != null) {
            problems.warn(r.at("message_field_role"), "message_field_role is an old name", "use message_property_mappings: {role: " + oldRole + "}");
            mappings.putIfAbsent("role", oldRole);
        }
        if (oldContent != null) {
            problems.warn(r.at("message_field_content"), "message_field_content is an old name", "use message_property_mappings: {content: " + oldContent + "}");
            mappings.putIfAbsent("content", oldContent);
        }
        r.mapping("roles");
        List<String> rolesToTrain = r.strings("roles_to_train", false);
        String trainOnEos = r.choice("train_on_eos", null, List.of("all", "turn", "last", "none"));
        r.choice("train_on_eot", null, List.of("all", "turn", "last", "none"));
        String chatTemplate = r.string("chat_template", null);
        r.string("chat_template_jinja", null);
        r.bool("drop_system_message", false);
        String fieldChosen = r.string("field_chosen", null);
        String fieldRejected = r.string("field_rejected", null);
        r.string("revision", null);
        if (Boolean.TRUE.equals(r.bool("trust_remote_code", false))) {
            problems.error(r.at("trust_remote_code"), "datasets[].trust_remote_code is unsupported: dataset loading scripts are not run",
                    "use a dataset stored as JSONL, JSON or Parquet");
        }
        r.integer("shards", null, 1);
        r.integer("shards_idx", null, 0);
        r.integer("preprocess_shards", null, 1);
        r.string("field_tools", null);
        r.string("field_thinking", null);
        r.string("template_thinking_key", null);
        r.bool("split_thinking", false);
        r.string("message_field_training", null);
        r.string("message_field_training_detail", null);
        r.finish();
        if (path == null) {
            problems.error(m.where(), "this " + listKey + " entry has no path", "add 'path: data/train.jsonl' (or a hub dataset id)");
            return null;
        }
        String type = objective == null ? typeText(typeNode) : datasetType(typeNode, objective, r);
        Path local = null;
        String remote = null;
        Path dir = m.where().dir() != null ? m.where().dir() : recipeDir;
        Path candidate = resolve(dir, path);
        if (candidate != null && Files.exists(candidate)) {
            local = candidate;
        } else if (looksLocal(path)) {
            problems.error(r.at("path"), "dataset file '" + path + "' does not exist (looked at " + candidate + ")",
                    "dataset paths are relative to the recipe file; fix the path or use a hub dataset id");
        } else {
            remote = path;
        }
        return new DatasetSpec(local, type, field, fieldMessages, Map.copyOf(mappings),
                rolesToTrain == null ? List.of("assistant") : rolesToTrain, trainOnEos, chatTemplate,
                m.where().label(), remote, split, fieldChosen, fieldRejected);
    }

    private static Path resolve(Path dir, String path) {
        try {
            String p = path.startsWith("~/") ? System.getProperty("user.home") + path.substring(1) : path;
            return dir.resolve(p).normalize();
        } catch (java.nio.file.InvalidPathException e) {
            return null;
        }
    }

    /** Hub ids look like {@code org/name}; files have an extension or an explicit relative/absolute prefix. */
    static boolean looksLocal(String path) {
        if (path.matches("^[a-zA-Z][a-zA-Z0-9+.-]*://.*")) {
            return false;
        }
        String lower = path.toLowerCase(Locale.ROOT);
        return path.startsWith("/") || path.startsWith("./") || path.startsWith("../") || path.startsWith("~/")
                || lower.endsWith(".jsonl") || lower.endsWith(".json") || lower.endsWith(".csv")
                || lower.endsWith(".parquet") || lower.endsWith(".arrow") || lower.endsWith(".txt")
                || lower.endsWith(".jsonl.gz") || lower.endsWith(".json.gz");
    }

    private static String typeText(YamlNode typeNode) {
        return typeNode instanceof Scalar s && s.value() instanceof String t ? t : null;
    }

    private String datasetType(YamlNode typeNode, Recipe.Objective objective, KeyReader r) {
        if (typeNode == null) {
            problems.error(r.where(), "this dataset has no type, so it would have to be pre-tokenized (unsupported)",
                    "add e.g. 'type: alpaca' or 'type: chat_template'");
            return null;
        }
        if (typeNode instanceof Mapping) {
            problems.error(typeNode.where(), "a user-defined prompt format (type: {...}) is unsupported",
                    "convert the data to alpaca fields (instruction, input, output) and use type: alpaca");
            return null;
        }
        if (!(typeNode instanceof Scalar s) || !(s.value() instanceof String type)) {
            problems.error(typeNode.where(), "datasets[].type must be a name, got " + YamlNode.describe(typeNode),
                    "write e.g. type: alpaca");
            return null;
        }
        DatasetTypes.Verdict v = DatasetTypes.check(type, objective);
        switch (v.kind()) {
            case SUPPORTED -> {
                return type;
            }
            case UNSUPPORTED -> problems.error(s.where(), "dataset type '" + type + "' is unsupported: " + v.detail(), v.hint());
            case UNKNOWN -> problems.error(s.where(), "unknown dataset type '" + type + "'" + v.detail(), v.hint());
        }
        return null;
    }

    private Recipe.Training training(KeyReader top, Recipe.Objective objective) {
        int sequenceLen = top.integer("sequence_len", 512, 1);
        boolean packing = top.bool("sample_packing", false);
        if (packing && !(objective instanceof Recipe.Objective.Sft) && top.has("rl")) {
            problems.error(top.at("sample_packing"), "sample_packing does not work with rl (preference pairs and generations are not packed)",
                    "set sample_packing: false");
        }
        boolean evalPacking = top.bool("eval_sample_packing", packing);
        boolean pad = top.bool("pad_to_sequence_len", packing);
        double epochs = top.number("num_epochs", 1.0, Double.MIN_VALUE, Double.MAX_VALUE);
        Integer maxSteps = top.integer("max_steps", null, 1);
        Double lr = top.number("learning_rate", null, 0, Double.MAX_VALUE);
        if (lr == null && !top.has("learning_rate")) {
            problems.error(top.where(), "learning_rate is required", "add e.g. 'learning_rate: 2e-4' (LoRA) or 1e-5 (full)");
        } else if (lr != null && lr == 0) {
            problems.error(top.at("learning_rate"), "learning_rate is 0, so nothing would be trained", "use e.g. learning_rate: 2e-4");
        }
        String scheduler = top.string("lr_scheduler", "cosine");
        if (!SCHEDULERS.contains(scheduler)) {
            if (OTHER_SCHEDULERS.contains(scheduler)) {
                problems.error(top.at("lr_scheduler"), "lr_scheduler: " + scheduler + " is unsupported",
                        "use one of " + String.join(", ", SCHEDULERS));
            } else {
                String close = Suggestions.closest(scheduler, SCHEDULERS);
                problems.error(top.at("lr_scheduler"), "lr_scheduler '" + scheduler + "' is not a scheduler Axolotl knows",
                        close != null ? "did you mean '" + close + "'?" : "use one of " + String.join(", ", SCHEDULERS));
            }
            scheduler = "cosine";
        }
        double minLrRatio = top.number("cosine_min_lr_ratio", 0.0, 0, 1);
        Integer warmupSteps = top.integer("warmup_steps", null, 0);
        Double warmupRatio = top.number("warmup_ratio", null, 0, 1);
        if (top.has("warmup_steps") && top.has("warmup_ratio")) {
            problems.error(top.at("warmup_ratio"), "warmup_steps and warmup_ratio are both set", "keep only one of them");
        }
        String optimizerName = top.string("optimizer", "adamw_torch_fused");
        Recipe.Optimizer optimizer = Recipe.Optimizer.byName(optimizerName);
        if (optimizer == null) {
            List<String> names = new ArrayList<>();
            for (Recipe.Optimizer o : Recipe.Optimizer.values()) {
                names.add(o.axolotlName());
            }
            if (OTHER_OPTIMIZERS.contains(optimizerName)) {
                problems.error(top.at("optimizer"), "optimizer: " + optimizerName + " is unsupported",
                        "use adamw_torch (or adamw_torch_8bit to save memory)");
            } else {
                List<String> all = new ArrayList<>(names);
                all.addAll(OTHER_OPTIMIZERS);
                String close = Suggestions.closest(optimizerName, all);
                problems.error(top.at("optimizer"), "optimizer '" + optimizerName + "' is not an optimizer Axolotl knows",
                        close != null ? "did you mean '" + close + "'?" : "use adamw_torch");
            }
            optimizer = Recipe.Optimizer.ADAMW_TORCH_FUSED;
        }
        double weightDecay = top.number("weight_decay", 0.0, 0, Double.MAX_VALUE);
        double beta1 = top.number("adam_beta1", 0.9, 0, 0.999999);
        double beta2 = top.number("adam_beta2", 0.999, 0, 0.999999);
        double eps = top.number("adam_epsilon", 1e-8, Double.MIN_VALUE, 1);
        double maxGradNorm = top.number("max_grad_norm", 1.0, 0, Double.MAX_VALUE);
        boolean checkpointing = false;
        YamlNode gc = top.node("gradient_checkpointing");
        if (gc instanceof Scalar s && s.value() instanceof Boolean b) {
            checkpointing = b;
        } else if (gc instanceof Scalar s && ("offload".equals(s.value()) || "offload_disk".equals(s.value()))) {
            problems.error(gc.where(), "gradient_checkpointing: " + s.value() + " (activation offloading) is unsupported",
                    "use gradient_checkpointing: true");
        } else if (gc != null) {
            problems.error(gc.where(), "gradient_checkpointing must be true or false, got " + YamlNode.describe(gc),
                    "write gradient_checkpointing: true");
        }
        Mapping gcKwargs = top.mapping("gradient_checkpointing_kwargs");
        if (gcKwargs != null) {
            KeyReader k = new KeyReader(gcKwargs, "gradient_checkpointing_kwargs.", problems);
            k.bool("use_reentrant", null);
            k.finish();
        }
        Integer seed = top.integer("seed", 42, 0);
        return new Recipe.Training(sequenceLen, packing, evalPacking, pad, epochs, maxSteps, lr == null ? 0 : lr, scheduler,
                minLrRatio, warmupSteps, warmupRatio, optimizer, weightDecay, beta1, beta2, eps, maxGradNorm, checkpointing,
                seed);
    }

    private Recipe.Precision precision(KeyReader top) {
        Flag bf16 = top.flag("bf16", Flag.AUTO);
        Flag fp16 = top.flag("fp16", Flag.FALSE);
        Flag tf32 = top.flag("tf32", Flag.AUTO);
        if (bf16 == Flag.TRUE && fp16 == Flag.TRUE) {
            problems.error(top.at("fp16"), "bf16 and fp16 are both true: a run computes in one of them",
                    "keep bf16: true and remove fp16 (or the other way round on GPUs without bfloat16)");
        }
        return new Recipe.Precision(bf16, fp16, tf32);
    }

    private Recipe.Hardware hardware(KeyReader top) {
        YamlNode n = top.node("hardware");
        if (n == null) {
            return new Recipe.Hardware.Unspecified();
        }
        if (n instanceof Scalar s && "cpu".equals(s.value())) {
            return new Recipe.Hardware.Cpu();
        }
        if (!(n instanceof Mapping m)) {
            problems.error(n.where(), "hardware must be 'cpu' or a mapping {gpus, nodes, gpu_memory}, got " + YamlNode.describe(n),
                    "write e.g. 'hardware: {gpus: 8, gpu_memory: 80GiB}' or 'hardware: cpu'");
            return new Recipe.Hardware.Unspecified();
        }
        KeyReader h = new KeyReader(m, "hardware.", problems);
        boolean cpu = h.bool("cpu", false);
        Integer gpus = h.integer("gpus", null, 1);
        Integer nodes = h.integer("nodes", 1, 1);
        String memory = h.string("gpu_memory", null);
        h.finish();
        Long bytes = null;
        if (memory != null) {
            try {
                bytes = dev.finetune.recipes.plan.MemorySize.parse(memory, h.at("gpu_memory").label());
            } catch (UserError e) {
                problems.error(e.where(), "hardware.gpu_memory: " + e.getMessage(), e.hint());
            }
        }
        if (cpu) {
            if (gpus != null) {
                problems.error(h.at("gpus"), "hardware sets both cpu: true and gpus", "keep one of them");
            }
            return new Recipe.Hardware.Cpu();
        }
        return new Recipe.Hardware.Gpus(gpus == null ? 1 : gpus, nodes == null ? 1 : nodes, bytes);
    }

    private Recipe.Distributed distributed(KeyReader top, Recipe.Training training, AdapterSpec adapter,
                                           Recipe.Objective objective) {
        List<String> fsdpList = top.strings("fsdp", true);
        Integer topVersion = top.integer("fsdp_version", null, 1);
        Mapping config = top.mapping("fsdp_config");
        Integer cp = top.integer("context_parallel_size", 1, 1);
        Integer tp = top.integer("tensor_parallel_size", 1, 1);
        top.integer("dp_shard_size", null, 1);
        Integer replicate = top.integer("dp_replicate_size", null, 1);
        if (cp != null && cp > 1) {
            problems.error(top.at("context_parallel_size"), "context_parallel_size > 1 is unsupported",
                    "remove it (sequences stay on one device; use gradient_checkpointing for long contexts)");
        }
        if (tp != null && tp > 1) {
            problems.error(top.at("tensor_parallel_size"), "tensor_parallel_size > 1 is unsupported",
                    "shard with fsdp_version: 2 instead");
        }
        if (replicate != null && replicate > 1) {
            problems.error(top.at("dp_replicate_size"), "dp_replicate_size > 1 (HSDP) is unsupported", "remove it: FSDP2 shards over all GPUs");
        }
        if (topVersion != null && topVersion > 2) {
            problems.error(top.at("fsdp_version"), "fsdp_version must be 1 or 2, got " + topVersion, "use fsdp_version: 2");
        }
        boolean on = config != null || (fsdpList != null && !fsdpList.isEmpty());
        if (!on) {
            if (topVersion != null) {
                problems.warn(top.at("fsdp_version"), "fsdp_version has no effect without fsdp_config", "add fsdp_config: or remove fsdp_version");
            }
            return new Recipe.Distributed(null, cp == null ? 1 : cp, tp == null ? 1 : tp);
        }
        KeyReader f = new KeyReader(config == null ? new Mapping(Map.of(), top.at("fsdp")) : config, "fsdp_config.", problems);
        if (config != null) {
            for (String k : List.copyOf(config.entries().keySet())) {
                if (k.startsWith("fsdp_") && !k.equals("fsdp_version")) {
                    f.rename(k, k.substring("fsdp_".length()), "the fsdp_ prefix inside fsdp_config is deprecated");
                }
            }
        }
        Integer innerVersion = f.integer("fsdp_version", null, 1);
        Integer innerVersion2 = f.integer("version", null, 1);
        int version = topVersion != null ? topVersion : innerVersion != null ? innerVersion : innerVersion2 != null ? innerVersion2 : 1;
        boolean offload = f.bool("offload_params", false);
        boolean reshard = f.bool("reshard_after_forward", true);
        boolean activationCheckpointing = f.bool("activation_checkpointing", false);
        boolean ramEfficient = f.bool("cpu_ram_efficient_loading", false);
        String stateDict = f.choice("state_dict_type", null, List.of("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"));
        f.choice("final_state_dict_type", null, List.of("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"));
        String wrap = f.choice("auto_wrap_policy", null, List.of("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP"));
        String cls = f.string("transformer_layer_cls_to_wrap", null);
        f.bool("sync_module_states", null);
        f.bool("use_orig_params", null);
        f.bool("cpu_offload_pin_memory", null);
        f.node("mixed_precision_policy");
        f.integer("min_num_params", null, 1);
        f.finish();
        if (version == 1) {
            problems.warn(fsdpList != null ? top.at("fsdp") : top.at("fsdp_config"),
                    "FSDP1 is deprecated (in Axolotl too); finetune runs it as FSDP2", "add fsdp_version: 2");
        }
        if (version == 2 && (training.optimizer() == Recipe.Optimizer.ADAMW_BNB_8BIT
                || training.optimizer() == Recipe.Optimizer.ADAMW_8BIT)) {
            problems.error(top.at("optimizer"), "FSDP2 cannot shard " + training.optimizer().axolotlName()
                    + " (bitsandbytes) optimizer state", "use optimizer: adamw_torch_8bit");
        }
        return new Recipe.Distributed(new Recipe.Fsdp(version, offload, reshard, activationCheckpointing, ramEfficient,
                stateDict, wrap, cls), cp == null ? 1 : cp, tp == null ? 1 : tp);
    }

    private Recipe.Backend backend(KeyReader top, Recipe.Hardware hardware, Recipe.Distributed distributed) {
        String b = top.choice("backend", "auto", List.of("auto", "single", "fsdp"));
        Recipe.Backend backend = Recipe.Backend.valueOf(b.toUpperCase(Locale.ROOT));
        if (backend == Recipe.Backend.SINGLE && hardware.devices() > 1) {
            problems.error(top.at("backend"), "backend: single runs on one device, but hardware has " + hardware.devices() + " GPUs",
                    "use backend: fsdp (or auto), or hardware: {gpus: 1}");
        }
        if (backend == Recipe.Backend.SINGLE && distributed.sharded()) {
            problems.error(top.at("backend"), "backend: single cannot shard, but fsdp_config is set",
                    "use backend: fsdp, or remove fsdp_config");
        }
        if (backend == Recipe.Backend.FSDP && hardware instanceof Recipe.Hardware.Cpu) {
            problems.error(top.at("backend"), "backend: fsdp needs GPUs, but hardware is cpu", "use backend: single");
        }
        return backend;
    }

    private Recipe.Output output(KeyReader top, Recipe.Data data) {
        boolean outputWritten = top.present("output_dir");
        String outputDir = top.string("output_dir", null);
        if (outputWritten && (outputDir == null || outputDir.isBlank())) {
            problems.error(top.at("output_dir"), "output_dir is empty", "write e.g. output_dir: ./outputs/my-run");
        }
        if (outputDir == null || outputDir.isBlank()) {
            outputDir = "./model-out";
        }
        // true (the newest complete checkpoint, as the HF Trainer reads it) or a checkpoint folder
        YamlNode resumeNode = top.node("resume_from_checkpoint");
        String resume = null;
        if (resumeNode instanceof Scalar r && r.value() != null) {
            resume = r.value() instanceof Boolean b ? b.toString() : r.text();
        } else if (resumeNode != null && !(resumeNode instanceof Scalar)) {
            problems.error(resumeNode.where(), "resume_from_checkpoint must be true or a checkpoint folder, got "
                    + YamlNode.describe(resumeNode), "write resume_from_checkpoint: true");
        }
        boolean autoResume = top.bool("auto_resume_from_checkpoints", false);
        String loraModelDir = top.string("lora_model_dir", null);
        String saveStrategy = top.choice("save_strategy", null, List.of("no", "epoch", "steps", "best"));
        Double saveSteps = top.number("save_steps", null, Double.MIN_VALUE, Double.MAX_VALUE);
        Integer savesPerEpoch = top.integer("saves_per_epoch", null, 0);
        int saveTotalLimit = top.integer("save_total_limit", 4, 1);
        String evalStrategy = top.choice("eval_strategy", null, List.of("no", "epoch", "steps"));
        Double evalSteps = top.number("eval_steps", null, Double.MIN_VALUE, Double.MAX_VALUE);
        Integer evalsPerEpoch = top.integer("evals_per_epoch", null, 0);
        Integer loggingSteps = top.integer("logging_steps", null, 1);
        Integer patience = top.integer("early_stopping_patience", null, 1);
        String metric = top.string("metric_for_best_model", null);
        if (saveSteps != null && savesPerEpoch != null) {
            problems.error(top.at("saves_per_epoch"), "save_steps and saves_per_epoch are both set", "keep only one of them");
        }
        if (evalSteps != null && evalsPerEpoch != null) {
            problems.error(top.at("evals_per_epoch"), "eval_steps and evals_per_epoch are both set", "keep only one of them");
        }
        if (saveSteps != null && saveStrategy != null && !saveStrategy.equals("steps")) {
            problems.error(top.at("save_strategy"), "save_steps needs save_strategy: steps, but it is " + saveStrategy,
                    "remove save_strategy or set it to steps");
        }
        if (evalSteps != null && evalStrategy != null && !evalStrategy.equals("steps")) {
            problems.error(top.at("eval_strategy"), "eval_steps needs eval_strategy: steps, but it is " + evalStrategy,
                    "remove eval_strategy or set it to steps");
        }
        if (evalsPerEpoch != null && evalStrategy != null && !evalStrategy.equals("steps")) {
            problems.error(top.at("eval_strategy"), "evals_per_epoch needs eval_strategy: steps (or none), but it is " + evalStrategy,
                    "remove eval_strategy");
        }
        if ("best".equals(saveStrategy) && metric == null) {
            problems.error(top.at("save_strategy"), "save_strategy: best needs metric_for_best_model",
                    "add metric_for_best_model: eval_loss");
        }
        boolean evalData = data.valSetSize() > 0 || !data.testDatasets().isEmpty();
        if (!evalData && (evalSteps != null || (evalStrategy != null && !evalStrategy.equals("no")))) {
            problems.error(top.at(evalSteps != null ? "eval_steps" : "eval_strategy"),
                    "evaluation is scheduled but there is no evaluation data (val_set_size is 0 and no test_datasets)",
                    "set val_set_size: 0.05, add test_datasets, or remove eval_steps/eval_strategy");
        }
        if (patience != null) {
            boolean ok = saveSteps != null && evalSteps != null && saveSteps >= 1 && evalSteps >= 1
                    && saveSteps % evalSteps == 0;
            if (!ok) {
                problems.error(top.at("early_stopping_patience"),
                        "early_stopping_patience needs save_steps and eval_steps, with save_steps a multiple of eval_steps",
                        "add e.g. eval_steps: 50 and save_steps: 100, or remove early_stopping_patience");
            }
        }
        return new Recipe.Output(outputDir, resume, autoResume, loraModelDir, saveStrategy, saveSteps, savesPerEpoch,
                saveTotalLimit, evalStrategy, evalSteps, evalsPerEpoch, loggingSteps, patience, metric);
    }
}
