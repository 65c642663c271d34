package dev.finetune.recipes;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * What the trainer a recipe resolves to ({@link ResolvedRun#backend}) refuses, asked once, here, while the recipe is
 * validated, and reported at the key's line. So "valid" means the run starts: {@code plan}, {@code --dry-run} and both
 * backends begin from the same {@link ValidatedRecipe} and ask nothing again. What only the machine can answer (its
 * CUDA devices, the worker's Python packages, the model's files when {@code base_model} names a hub model) is checked
 * when the run starts, and {@link #leftToTheRun} says which.
 */
final class RunChecks {
    private RunChecks() {}

    /** The optimizers that are torch's AdamW, as the worker builds it (fused on CUDA). */
    static final Set<Optimizer> TORCH_ADAMW = Set.of(Optimizer.ADAMW_TORCH,
            Optimizer.ADAMW_TORCH_FUSED, Optimizer.ADAMW_HF);

    static void check(Recipe recipe, ResolvedRun run, Problems problems, Object where) {
        Optimizer optimizer = recipe.training().optimizer();
        if (optimizer == null || problems.invalid.contains("optimizer")) {
            optimizer = Optimizer.ADAMW_TORCH;
        }
        Object optimizerAt = problems.at("optimizer", where);
        if (run.backend() == ResolvedRun.Backend.SINGLE) {
            // Every 32-bit AdamW spelling is the same update (paging only moves where the moments live), and SGD
            // is the HF Trainer's; 8- and 4-bit moments are other updates, which the JVM trainer does not have.
            if (optimizer.stateBytesPerParam() != 8 && optimizer != Optimizer.SGD) {
                problems.error(optimizerAt, "optimizer " + optimizer.axolotlName() + " is unsupported by the "
                        + "single-device trainer, where this recipe runs (" + where(run) + "): it runs 32-bit AdamW and SGD",
                        "use optimizer: adamw_torch, or run on a GPU (hardware: {gpus: 1}), where the torch worker has "
                                + "bitsandbytes' 8-bit AdamW");
            }
            if (recipe.data().preparedPath() != null) {
                problems.warn(problems.at("dataset_prepared_path", where), "dataset_prepared_path is not used by the "
                        + "single-device trainer, where this recipe runs (" + where(run) + "): it tokenizes the data "
                        + "again at every start (nothing trained changes)", "remove it, or keep it for the torch "
                        + "worker (backend: fsdp), which caches the packed batches there and reuses them");
            }
            if (recipe.output().saveOnlyModel()) {
                problems.warn(problems.at("save_only_model", where), "save_only_model has no effect on the "
                        + "single-device trainer, where this recipe runs (" + where(run) + "): its checkpoints always "
                        + "hold what resuming needs", "remove it");
            }
            return;
        }
        requireWorkerImplements(recipe, run, WorkerCapabilities.declared(), problems, where);
        workerSharding(recipe, problems, where);
        // the torch worker: torch's AdamW and SGD, bitsandbytes' classes (finetune_worker/optimizers.py)
        if (!TORCH_ADAMW.contains(optimizer) && optimizer != Optimizer.SGD && !optimizer.bitsAndBytes()) {
            problems.error(optimizerAt, "optimizer: " + optimizer.axolotlName() + " is unsupported: it is not in "
                    + "the torch worker, which runs torch's AdamW and SGD and bitsandbytes' 8-bit and paged AdamW",
                    "use optimizer: " + (optimizer.stateBytesPerParam() < 8 ? "adamw_bnb_8bit" : "adamw_torch_fused"));
        }
        boolean gpu = run.device() == ResolvedRun.Device.CUDA;
        if (recipe.adapter() instanceof AdapterSpec.Lora lora && lora.quantized()) {
            Object adapterAt = problems.at("adapter", where);
            if (run.worldSize() > 1) {
                problems.error(adapterAt, "QLoRA over " + run.worldSize() + " ranks is unsupported: FSDP2 gathers "
                        + "bitsandbytes' 4-bit weights back as plain tensors without their quantization state, so "
                        + "they cannot be sharded", "train QLoRA on one GPU (hardware: {gpus: 1}), or use adapter: "
                        + "lora with FSDP");
            } else if (!gpu && !refusedAt(problems, adapterAt)) { // ResolvedRun refuses a family the JVM lacks
                problems.error(adapterAt, "adapter: qlora on the torch worker is unsupported on the CPU: it needs "
                        + "bitsandbytes on a CUDA GPU, and this run computes on the CPU", "run it on a GPU "
                        + "(hardware: {gpus: 1}), or train on the CPU in this JVM (hardware: cpu, backend: single), "
                        + "which runs the same NF4");
            }
        }
        if (optimizer.bitsAndBytes()) {
            if (run.worldSize() > 1) {
                problems.error(optimizerAt, optimizer.axolotlName() + " over " + run.worldSize() + " ranks is "
                        + "unsupported: bitsandbytes' optimizers keep each tensor's whole state and FSDP2 hands them "
                        + "shards", "use optimizer: adamw_torch_fused with FSDP, or " + optimizer.axolotlName()
                        + " on one GPU");
            } else if (!gpu) {
                problems.error(optimizerAt, "optimizer: " + optimizer.axolotlName() + " on the torch worker is "
                        + "unsupported on the CPU: it needs bitsandbytes on a CUDA GPU, and this run computes on the "
                        + "CPU", "run it on a GPU (hardware: {gpus: 1}), or use optimizer: adamw_torch_fused");
            }
        }
    }

    /** The objective and the DPO loss types, by what the worker declares it implements. */
    static void requireWorkerImplements(Recipe recipe, ResolvedRun run, WorkerCapabilities worker, Problems problems,
            Object where) {
        String objective = recipe.objective().key();
        if (!worker.objectives().contains(objective)) {
            problems.error(problems.at("rl", where), "rl: " + objective + " is unsupported by the torch worker, where "
                    + "this recipe runs (" + where(run) + "): it trains " + String.join(", ", worker.objectives()),
                    "train it on the CPU in this JVM (hardware: cpu, backend: single)");
        }
        Object lossAt = problems.at("dpo_loss_type", where);
        if (recipe.objective() instanceof Recipe.Objective.Dpo dpo && !refusedAt(problems, lossAt)) {
            List<String> lacking = dpo.lossTypes().stream().map(DpoLossType::key)
                    .filter(t -> !worker.dpoLossTypes().contains(t)).distinct().toList();
            if (!lacking.isEmpty()) {
                problems.error(lossAt, "dpo_loss_type " + String.join(", ", lacking)
                        + (lacking.size() == 1 ? " is" : " are") + " unsupported by the torch worker, where this "
                        + "recipe runs (" + where(run) + "): it implements " + String.join(", ",
                                worker.dpoLossTypes()), "use one of those; the single-device trainer (hardware: cpu, "
                                + "backend: single) runs every TRL loss type");
            }
        }
    }

    /**
     * {@code overrides_of_model_config} on the single-device trainer: a key that changes nothing it reads from
     * config.json would be accepted and have no effect (transformers, on the worker, applies every key). Asked here
     * when the model's config.json is at hand, else by the run as it starts, with the same function.
     *
     * @param config the model's config.json as written
     */
    static void requireConfigOverridesRead(Recipe recipe, ResolvedRun run, com.google.gson.JsonObject config,
            Problems problems, Object where) {
        Map<String, Object> overrides = recipe.model().configOverrides();
        if (run.backend() != ResolvedRun.Backend.SINGLE || overrides.isEmpty()) {
            return;
        }
        Object at = problems.at("overrides_of_model_config", problems.at("model_config", where));
        try {
            String unread = dev.finetune.recipes.model.ConfigOverrides.jvmRefusal(config, overrides);
            if (unread != null) {
                String first = dev.finetune.recipes.model.ConfigOverrides.unreadByJvm(config, overrides, "config.json")
                        .get(0);
                problems.error(problems.at("overrides_of_model_config." + first, at), unread,
                        dev.finetune.recipes.model.ConfigOverrides.JVM_HINT);
            }
        } catch (UserError e) {
            problems.error(at, "overrides_of_model_config makes the model's config unusable: " + e.getMessage(),
                    e.hint());
        }
    }

    /**
     * LoRA on stacked experts or a router that is no linear goes through PEFT's {@code target_parameters}, which adds
     * the adapter to the weight itself and so has no input to drop out. The worker starts PEFT's own adapter only for
     * families the JVM lacks and when no {@code lora_model_dir} is continued; then a {@code lora_dropout} above 0
     * cannot be carried out and is refused here, at its line, rather than when the run starts.
     */
    static void requireExpertLoraWithoutDropout(Recipe recipe, ResolvedRun run,
            dev.finetune.recipes.model.ModelConfig config, Problems problems, Object where) {
        if (run.backend() == ResolvedRun.Backend.SINGLE || config.notInJvmBecause() == null
                || recipe.output().loraModelDir() != null || !(recipe.adapter() instanceof AdapterSpec.Lora lora)
                || lora.dropout() <= 0 || config.parameters().peftTargets(lora).parameters().isEmpty()) {
            return;
        }
        // "unsupported": Axolotl accepts it (with transformers < 5 the experts were linears, with an input to drop)
        problems.error(problems.at("lora_dropout", where), "lora_dropout " + YamlNumbers.fmt(lora.dropout())
                + " with LoRA on " + config.modelType() + "'s experts or router is unsupported: PEFT's "
                + "target_parameters fold those adapters into the weight, so no input is there to drop out",
                "set lora_dropout: 0, or target only attention and dense projections (lora_target_modules)");
    }

    /**
     * The FSDP settings the torch worker has no counterpart for, refused at their key (#21). Everything else in
     * fsdp_config it honours: each decoder layer is its own unit (TRANSFORMER_BASED_WRAP, or the classes named in
     * transformer_layer_cls_to_wrap), checkpoints hold the sharded DCP state, with the weights in Hugging Face's layout
     * besides unless state_dict_type is SHARDED_STATE_DICT. (fp16 on the worker is refused with the precision keys.)
     */
    private static void workerSharding(Recipe recipe, Problems problems, Object where) {
        Recipe.Fsdp fsdp = recipe.distributed().fsdp();
        if (fsdp == null) {
            return;
        }
        if ("LOCAL_STATE_DICT".equals(fsdp.stateDictType())) {
            problems.error(problems.at("fsdp_config.state_dict_type", where), "fsdp_config.state_dict_type: "
                    + "LOCAL_STATE_DICT is unsupported: FSDP2 checkpoints are sharded and reshardable (DCP)",
                    "use SHARDED_STATE_DICT (checkpoints without the Hugging Face weights) or FULL_STATE_DICT");
        }
        if ("SIZE_BASED_WRAP".equals(fsdp.autoWrapPolicy())) {
            problems.error(problems.at("fsdp_config.auto_wrap_policy", where), "fsdp_config.auto_wrap_policy: "
                    + "SIZE_BASED_WRAP is unsupported: the worker makes each decoder layer its own FSDP unit",
                    "use TRANSFORMER_BASED_WRAP (or remove the key)");
        }
    }

    /** Whether an error was already said at {@code where}: one mistake, one error. */
    private static boolean refusedAt(Problems problems, Object where) {
        return problems.errors.stream().anyMatch(f -> f.where().equals(String.valueOf(where)));
    }

    /** The run in a few words: the trainer's device and ranks. */
    private static String where(ResolvedRun run) {
        return run.device() + ", " + run.worldSize() + (run.worldSize() == 1 ? " rank" : " ranks");
    }

    /**
     * {@code tokenizer_default} (also what a chat dataset without any template means) names the model's own template:
     * with a local model folder that has none, the data cannot be rendered, which the run would find as it starts.
     * Mirrors the trainers' ChatTemplateFormat/RlRows choice: the dataset's template, else the recipe's.
     */
    static void requireModelTemplate(Recipe recipe, Path recipeDir, Problems problems) {
        String folder = recipe.model().tokenizerConfig() != null ? recipe.model().tokenizerConfig()
                : recipe.model().baseModel();
        if (folder == null || folder.isBlank() || problems.invalid.contains("chat_template")) {
            return; // a chat_template refused already: one mistake, one error
        }
        Path dir = recipeDir == null ? Path.of(folder) : recipeDir.resolve(folder);
        if (!Files.isDirectory(dir) || hasTemplate(dir)) {
            return;
        }
        List<DatasetSpec> all = new ArrayList<>(recipe.data().datasets());
        all.addAll(recipe.data().testDatasets());
        for (DatasetSpec d : all) {
            if (d.type() != DatasetType.CHAT_TEMPLATE && d.type() != DatasetType.CHAT_TEMPLATE_DEFAULT) {
                continue;
            }
            boolean own = d.chatTemplate() != null && !d.chatTemplate().isBlank();
            String name = own ? d.chatTemplate() : recipe.model().chatTemplate();
            String jinja = own && d.chat() != null && d.chat().chatTemplateJinja() != null ? d.chat().chatTemplateJinja()
                    : recipe.model().chatTemplateJinja();
            boolean modelsOwn = name == null || name.isBlank() ? jinja == null || jinja.isBlank()
                    : name.strip().equals(ChatTemplateNames.TOKENIZER_DEFAULT);
            if (modelsOwn) {
                problems.error(own ? d.where() : problems.at("chat_template", d.where()), "chat_template is "
                        + "tokenizer_default but the model at " + dir + " has no chat template",
                        "name one, e.g. chat_template: chatml");
                return;
            }
        }
    }

    /** Where transformers keeps a model's template: tokenizer_config.json's chat_template, or chat_template.jinja. */
    private static boolean hasTemplate(Path dir) {
        if (Files.isRegularFile(dir.resolve("chat_template.jinja"))) {
            return true;
        }
        try {
            var config = com.google.gson.JsonParser.parseString(Files.readString(dir.resolve("tokenizer_config.json")));
            return config.isJsonObject() && config.getAsJsonObject().has("chat_template")
                    && !config.getAsJsonObject().get("chat_template").isJsonNull();
        } catch (java.io.IOException | RuntimeException e) {
            return true; // unreadable or absent: the tokenizer's own load reports it, with its file
        }
    }

    /** Whether validate read the model's own config.json (a local folder, or the HF cache), not the built-in table. */
    private static boolean configAtHand(Recipe recipe, Path recipeDir) {
        String name = recipe.model().baseModelConfig() != null ? recipe.model().baseModelConfig()
                : recipe.model().baseModel();
        try {
            return name != null && dev.finetune.recipes.model.ModelSource.resolve(name, recipe.model().revision(),
                    recipeDir, null) instanceof dev.finetune.recipes.model.ModelSource.Found f
                    && !f.from().equals("built-in table");
        } catch (UserError e) {
            return false;
        }
    }

    /** Whether only the hub has the model's config.json: validate has not seen its architecture. */
    private static boolean architectureUnknown(Recipe recipe, Path recipeDir) {
        String name = recipe.model().baseModelConfig() != null ? recipe.model().baseModelConfig()
                : recipe.model().baseModel();
        try {
            return name != null && dev.finetune.recipes.model.ModelSource.resolve(name, name.equals(
                    recipe.model().baseModel()) ? recipe.model().revision() : null, recipeDir, null)
                    instanceof dev.finetune.recipes.model.ModelSource.Unknown;
        } catch (UserError e) {
            return false; // an unreadable config.json is an error of its own
        }
    }

    /**
     * What this run's start still checks because only the machine can answer it, as {@code validate} prints it:
     * {@code validate} cannot know these.
     */
    static String leftToTheRun(Recipe recipe, ResolvedRun run, Path recipeDir) {
        List<String> left = new ArrayList<>();
        String base = recipe.model().baseModel();
        if (base != null && !Files.isDirectory(recipeDir == null ? Path.of(base) : recipeDir.resolve(base))) {
            left.add("base_model '" + base + "' from the Hugging Face cache or the hub (its files, and access to them)");
        }
        if (architectureUnknown(recipe, recipeDir)) {
            // the run reads config.json before any weight and validates again: a family finetune does not train, or
            // LoRA targets its modules lack (Axolotl's replit example: Wqkv of an MPT model), is refused only then
            left.add("its architecture (config.json, which neither the cache nor the built-in table holds): a family "
                    + "finetune trains, and lora_target_modules against its modules");
        }
        if (run.backend() == ResolvedRun.Backend.FSDP) {
            left.add("the worker's Python with torch, transformers and peft");
        } else if (!recipe.model().configOverrides().isEmpty() && !configAtHand(recipe, recipeDir)) {
            left.add("overrides_of_model_config against the model's config.json");
        }
        if (run.device() == ResolvedRun.Device.CUDA && run.backend() == ResolvedRun.Backend.FSDP) {
            left.add(run.perNode() + " CUDA device" + (run.perNode() == 1 ? "" : "s") + " on each node"
                    + (recipe.adapter() instanceof AdapterSpec.Lora l && l.quantized()
                            || recipe.training().optimizer() != null && recipe.training().optimizer().bitsAndBytes()
                            ? ", and bitsandbytes" : ""));
        }
        return left.isEmpty() ? "" : "checked when the run starts, not here: " + String.join("; ", left) + "\n";
    }
}
