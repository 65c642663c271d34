package dev.finetune.trainers.backend.fsdp;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonObject;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.adapters.peft.AdapterWeights;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.DpoLossType;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ReferenceModel;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.SchedulePlan;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters;
import dev.finetune.trainers.backend.DatasetIdentity;
import dev.finetune.trainers.backend.RunFiles;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.train.DataOrder;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.checkpoint.ResumeKeys;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Everything the worker needs besides the batches file, decided here once: the resolved settings as JSON, the
 * schedule (which micro batch at every data position, the learning rate of every step) and the initial LoRA weights.
 * The worker computes nothing that is random or a schedule, so its loss sequence can be compared with the JVM
 * trainer's step by step.
 *
 * @param microBatchesPerStep micro batches per optimizer step over all ranks: ranks × gradient_accumulation_steps
 */
public record WorkerPlan(Path folder, Path planFile, long totalSteps, long warmupSteps, int microBatchesPerStep,
        int microBatchesPerEpoch, Trainer.Run run) {

    public static final String FOLDER = "worker";
    /** The DPO loss types the worker's objectives.Dpo implements, as the JVM trainer's DpoLoss writes them. */
    static final java.util.Set<DpoLossType> WORKER_DPO_LOSSES = java.util.EnumSet.of(DpoLossType.SIGMOID,
            DpoLossType.HINGE, DpoLossType.IPO, DpoLossType.SIGMOID_NORM);

    /** Micro batches per optimizer step over all ranks: the batch plan's ranks × gradient_accumulation_steps. */
    static int microBatchesPerStep(ValidatedRecipe validated) {
        return validated.plan().accumulation() * validated.plan().dataParallelRanks();
    }

    /** The schedule of a run, without writing anything (also what {@code --dry-run} reports). */
    public static Trainer.Run run(Recipe recipe, int microBatchesPerStep, int microBatchesPerEpoch,
            String baseModelIdentity) {
        return Trainer.Run.of(recipe, SchedulePlan.of(recipe, microBatchesPerStep, microBatchesPerEpoch, false),
                DatasetIdentity.of(recipe.data().datasets()), baseModelIdentity);
    }

    /** Writes plan.json, schedule.safetensors and (LoRA) initial-adapter/ under {@code output_dir/worker}. */
    /**
     * @param tokenizerDir the tokenizer's folder, whose files every checkpoint gets
     * @param resumeFrom the verified checkpoint to continue (WorkerCheckpoints.resumeFolder), or null
     */
    public static WorkerPlan write(ValidatedRecipe validated, Preprocess.Prepared data, Launch launch, Path modelDir,
            String modelIdentity, Path tokenizerDir, Path resumeFrom) {
        Recipe recipe = validated.recipe();
        dev.finetune.recipes.BatchPlan batch = validated.plan();
        int perStep = microBatchesPerStep(validated);
        int perEpoch = data.trainBatches();
        Trainer.Run run = run(recipe, perStep, perEpoch, modelIdentity);
        long total = run.schedule().totalSteps();
        long warmup = run.schedule().warmupSteps();
        Path outputDir = run.outputDir();
        Path folder = outputDir.resolve(FOLDER);
        Path schedule = folder.resolve("schedule.safetensors");
        // On a multi-node run the first node writes the shared files; the others' workers cannot start before it
        // joined the rendezvous, which it does only after writing them.
        boolean writer = launch.nodeRank() == 0;
        if (writer) {
            writeSchedule(schedule, run, total, warmup, perStep, perEpoch);
        }

        Map<String, String> invariants = new TreeMap<>(run.resumeInvariants());
        invariants.put("micro_batches_per_epoch", Integer.toString(perEpoch));
        invariants.put("micro_batches_per_step", Integer.toString(perStep));

        JsonObject plan = new JsonObject();
        plan.addProperty("format", "finetune-worker-plan-1");
        plan.addProperty("base_model", modelDir.toAbsolutePath().toString());
        plan.addProperty("output_dir", outputDir.toAbsolutePath().toString());
        plan.addProperty("batches", data.file().toAbsolutePath().toString());
        plan.addProperty("schedule", schedule.toAbsolutePath().toString());
        plan.add("objective", objective(recipe, validated.run().reference()));
        if (recipe.adapter() instanceof AdapterSpec.Lora lora) {
            JsonObject adapter = new JsonObject();
            adapter.addProperty("kind", "lora");
            ModelConfig config = ModelConfig.read(modelDir);
            if (config.notInJvmBecause() == null) {
                Path initial = folder.resolve("initial-adapter");
                if (writer) {
                    writeInitialAdapter(recipe, lora, modelDir, initial);
                }
                adapter.addProperty("initial", initial.toAbsolutePath().toString());
            } else {
                otherFamilyAdapter(recipe, lora, config, adapter);
            }
            if (lora.quantized()) {
                // bitsandbytes' NF4 with 64 values per absmax, as the JVM's Nf4Quantized (WorkerRequirements checked
                // that bitsandbytes is there)
                adapter.addProperty("quantized", true);
                adapter.addProperty("double_quant", lora.quantization().doubleQuant());
            }
            plan.add("adapter", adapter);
        }
        Recipe.Fsdp fsdp = recipe.distributed().fsdp();
        plan.addProperty("gradient_checkpointing", validated.run().activationCheckpointing());
        plan.addProperty("reshard_after_forward", fsdp == null || fsdp.reshardAfterForward());
        plan.addProperty("offload_params", fsdp != null && fsdp.offloadParams());
        plan.addProperty("bf16", recipe.precision().bf16().name().toLowerCase(java.util.Locale.ROOT));
        plan.add("kernels", kernels(recipe.speedups()));
        plan.addProperty("total_steps", total);
        plan.addProperty("micro_batches_per_step", perStep);
        plan.addProperty("micro_batches_per_epoch", perEpoch);
        plan.addProperty("eval_steps", run.schedule().evalEvery());
        plan.addProperty("save_steps", run.schedule().saveEvery());
        plan.addProperty("save_total_limit", run.saveTotalLimit());
        JsonObject optimizer = new JsonObject();
        // torch's AdamW or one of bitsandbytes' (WorkerRequirements refused the others)
        optimizer.addProperty("name", WorkerRequirements.optimizer(recipe).axolotlName());
        optimizer.addProperty("beta1", run.training().adamBeta1());
        optimizer.addProperty("beta2", run.training().adamBeta2());
        optimizer.addProperty("epsilon", run.training().adamEpsilon());
        optimizer.addProperty("weight_decay", run.training().weightDecay());
        optimizer.addProperty("max_grad_norm", run.training().maxGradNorm());
        plan.add("optimizer", optimizer);
        plan.addProperty("seed", run.training().seed());
        if (run.training().lossWatchdogThreshold() != null) {
            JsonObject watchdog = new JsonObject();
            watchdog.addProperty("threshold", run.training().lossWatchdogThreshold());
            watchdog.addProperty("patience", run.training().lossWatchdogPatience());
            plan.add("loss_watchdog", watchdog);
        }
        plan.addProperty("resume_key", ResumeKeys.hash(invariants));
        if (resumeFrom != null) {
            plan.addProperty("resume", resumeFrom.toAbsolutePath().toString());
        }
        // what trainer_state.json records, as the JVM trainer's checkpoints do
        plan.addProperty("logging_steps", run.schedule().logEvery());
        plan.addProperty("num_epochs", run.training().numEpochs());
        plan.addProperty("micro_batch_size", batch.micro());
        com.google.gson.JsonArray tokenizer = new com.google.gson.JsonArray();
        for (String name : RunFiles.TOKENIZER_FILES) {
            if (Files.isRegularFile(tokenizerDir.resolve(name))) {
                tokenizer.add(tokenizerDir.resolve(name).toAbsolutePath().toString());
            }
        }
        plan.add("tokenizer_files", tokenizer);
        plan.addProperty("world_size", validated.run().worldSize());
        plan.addProperty("data_log_dir", folder.resolve("logs").toAbsolutePath().toString());
        Path planFile = folder.resolve("plan.json");
        if (writer) {
            writeAtomically(planFile, new GsonBuilder().setPrettyPrinting().create().toJson(plan) + "\n");
        }
        return new WorkerPlan(folder, planFile, total, warmup, perStep, perEpoch, run);
    }

    /**
     * How the worker computes (finetune_worker.kernels): always the LM head inside the loss in chunks and per-document
     * attention without a dense mask, where the model allows (the worker says where it does not); the recipe's
     * speed keys as written ({@code torch_compile: auto} is decided by the worker, which knows its device).
     */
    static JsonObject kernels(Recipe.Speedups speedups) {
        JsonObject kernels = new JsonObject();
        kernels.addProperty("head", "chunked");
        kernels.addProperty("attention", "auto");
        kernels.addProperty("torch_compile", speedups.torchCompile().name().toLowerCase(java.util.Locale.ROOT));
        if (speedups.compileBackend() != null) {
            kernels.addProperty("torch_compile_backend", speedups.compileBackend());
        }
        if (speedups.compileMode() != null) {
            kernels.addProperty("torch_compile_mode", speedups.compileMode());
        }
        com.google.gson.JsonArray liger = new com.google.gson.JsonArray();
        speedups.liger().forEach(liger::add);
        kernels.add("liger", liger);
        kernels.addProperty("activation_offloading", speedups.activationOffloading());
        return kernels;
    }

    static JsonObject objective(Recipe recipe, ReferenceModel referenceModel) {
        JsonObject objective = new JsonObject();
        objective.addProperty("kind", Preprocess.objectiveKind(recipe));
        if (recipe.objective() instanceof Recipe.Objective.Dpo dpo) {
            // as TRL and the JVM trainer: LoRA from scratch compares with the adapter switched off; a full fine-tune,
            // and an adapter continued from lora_model_dir (written into initial-adapter/), with the starting weights
            objective.addProperty("reference", reference(referenceModel));
            com.google.gson.JsonArray terms = new com.google.gson.JsonArray();
            for (int i = 0; i < dpo.lossTypes().size(); i++) {
                DpoLossType type = dpo.lossTypes().get(i);
                if (!WORKER_DPO_LOSSES.contains(type)) {
                    throw new UserError("dpo_loss_type", "the fsdp worker implements " + WORKER_DPO_LOSSES.stream()
                            .map(DpoLossType::key).toList() + ", not " + type.key(),
                            "use one of those, or backend: single (which runs every TRL loss type)");
                }
                JsonObject term = new JsonObject();
                term.addProperty("type", type.key());
                term.addProperty("weight", dpo.lossWeights().get(i));
                terms.add(term);
            }
            objective.add("terms", terms);
            objective.addProperty("beta", dpo.beta());
        }
        if (recipe.objective() instanceof Recipe.Objective.Grpo grpo) {
            grpo(referenceModel, grpo, objective);
        }
        return objective;
    }

    /** The sampling and loss settings of the worker's grpo module, named as in TRL; rewards stay in Java. */
    private static void grpo(ReferenceModel referenceModel, Recipe.Objective.Grpo grpo, JsonObject objective) {
        // as TRL and the JVM trainer: the adapter switched off, or lora_model_dir's adapter frozen as it starts
        objective.addProperty("reference", reference(referenceModel));
        objective.addProperty("num_generations", grpo.numGenerations());
        objective.addProperty("max_completion_length", grpo.maxCompletionLength());
        objective.addProperty("temperature", grpo.temperature());
        objective.addProperty("top_k", grpo.sampling().topK());
        objective.addProperty("top_p", grpo.sampling().topP());
        objective.addProperty("min_p", grpo.sampling().minP());
        objective.addProperty("repetition_penalty", grpo.sampling().repetitionPenalty());
        objective.addProperty("loss_type", grpo.lossType().key());
        objective.addProperty("epsilon", grpo.epsilon());
        objective.addProperty("epsilon_high", grpo.epsilonHigh());
        if (grpo.delta() != null) {
            objective.addProperty("delta", grpo.delta());
        }
        objective.addProperty("beta", grpo.beta());
        objective.addProperty("use_bias_correction_kl", grpo.biasCorrectedKl());
        objective.addProperty("mask_truncated_completions", grpo.maskTruncatedCompletions());
    }

    /**
     * What a DPO or GRPO run compares its policy with: {@code adapter_disabled} or {@code initial} (the starting
     * weights).
     */
    static String reference(ReferenceModel reference) {
        return reference instanceof ReferenceModel.AdapterDisabled ? "adapter_disabled" : "initial";
    }

    /**
     * {@code order}: the micro batch at each of the run's data positions, from the JVM trainer's own
     * {@link DataOrder}; {@code lr}: each step's learning rate from its {@link dev.finetune.recipes.LrScheduler}.
     */
    private static void writeSchedule(Path file, Trainer.Run run, long total, long warmup, int perStep,
            int perEpoch) {
        long positions = Math.multiplyExact(total, perStep);
        DataOrder order = run.order(perEpoch);
        TensorsFile.write(file, List.of(
                new TensorsFile.Tensor("order", "I32", new long[] {positions}, sink -> {
                    for (long p = 0; p < positions; p++) {
                        sink.int32(order.at(p));
                    }
                }),
                new TensorsFile.Tensor("lr", "F64", new long[] {total}, sink -> {
                    for (long step = 0; step < total; step++) {
                        sink.float64(run.schedule().learningRate(run.training(), step));
                    }
                })), Map.of("format", "finetune-schedule-1"));
    }

    /**
     * A family the JVM trainer does not run has no Java-made initial adapter to share: the worker starts PEFT's own
     * (A drawn from the seed, B = 0) on exactly the targets the plan counted, by full name, or continues the saved
     * PEFT adapter of {@code lora_model_dir} as it is.
     */
    private static void otherFamilyAdapter(Recipe recipe, AdapterSpec.Lora lora, ModelConfig config, JsonObject adapter) {
        if (recipe.output().loraModelDir() != null) {
            adapter.addProperty("initial", Path.of(recipe.output().loraModelDir()).toAbsolutePath().toString());
            return;
        }
        ModelParameters.PeftTargets targets = config.parameters().peftTargets(lora);
        if (!targets.parameters().isEmpty() && lora.dropout() > 0) {
            throw new UserError("lora_dropout", "LoRA on " + config.modelType() + "'s experts or router (PEFT's "
                    + "target_parameters) cannot drop out its input: PEFT folds those adapters into the weight",
                    "set lora_dropout: 0, or target only attention and dense projections");
        }
        adapter.addProperty("r", lora.r());
        adapter.addProperty("alpha", lora.alpha());
        adapter.addProperty("dropout", lora.dropout());
        adapter.addProperty("rslora", lora.useRslora());
        adapter.add("target_modules", new Gson().toJsonTree(targets.modules()));
        adapter.add("target_parameters", new Gson().toJsonTree(targets.parameters()));
    }

    /**
     * The JVM trainer's initial adapter (its A draw from the seed and layer name, B = 0; or {@code lora_model_dir}'s
     * weights) in PEFT's layout. The base weights are mapped, not copied: only the adapter arrays are made.
     */
    static void writeInitialAdapter(Recipe recipe, AdapterSpec.Lora spec, Path modelDir, Path folder) {
        Engine.getInstance();
        // QLoRA's adapter starts as LoRA's: the base weights stay mapped here, never quantized (the worker's
        // bitsandbytes does that on its device)
        AdapterSpec.Lora unquantized = new AdapterSpec.Lora(spec.r(), spec.alpha(), spec.dropout(), spec.targetModules(),
                spec.targetAllLinear(), spec.useRslora(), null);
        try (NDManager manager = NDManager.newBaseManager()) {
            LoraFactory factory = new LoraFactory(unquantized, manager, recipe.training().seed());
            LlamaModel model = LlamaModel.load(modelDir, manager, new LoadOptions(factory, false, true));
            factory.requireMatches();
            if (recipe.output().loraModelDir() != null) {
                Path saved = Path.of(recipe.output().loraModelDir());
                AdapterFiles.Saved adapter = AdapterFiles.read(saved, manager);
                AdapterWeights.load(model.trainable(), adapter.tensors(),
                        saved.resolve(AdapterFiles.WEIGHTS_FILE).toString());
            }
            Path staging = folder.resolveSibling("." + folder.getFileName() + ".tmp");
            deleteTree(staging);
            AdapterFiles.write(staging, AdapterConfig.of(spec, factory.peftTargets(), recipe.model().baseModel()),
                    model.trainable());
            deleteTree(folder);
            Files.move(staging, folder, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            throw new UserError(folder.toString(), "cannot write the initial adapter: " + e.getMessage(),
                    "check that output_dir is writable", e);
        }
    }

    static void writeAtomically(Path file, String text) {
        try {
            Files.createDirectories(file.getParent());
            Path temporary = file.resolveSibling("." + file.getFileName() + ".tmp");
            Files.writeString(temporary, text, StandardCharsets.UTF_8);
            Files.move(temporary, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot write: " + e.getMessage(), "check that output_dir is writable",
                    e);
        }
    }

    private static void deleteTree(Path path) throws IOException {
        if (!Files.exists(path)) {
            return;
        }
        try (var walk = Files.walk(path)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.delete(p);
            }
        }
    }
}
