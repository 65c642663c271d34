package dev.finetune.trainers.backend.fsdp;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.io.AtomicFiles;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.adapters.peft.AdapterWeights;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ReferenceModel;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.SchedulePlan;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters;
import dev.finetune.recipes.plan.MemoryModel;
import dev.finetune.trainers.backend.DatasetIdentity;
import dev.finetune.trainers.backend.RunFiles;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.train.DataOrder;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.checkpoint.ResumeKeys;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Everything the worker needs besides the batches file, decided here once: the resolved settings
 * ({@link WorkerPlanFile}, {@code plan.json}), the
 * schedule (which micro batch at every data position, the learning rate of every step) and the initial LoRA weights.
 * The worker computes nothing that is random or a schedule, so its loss sequence can be compared with the JVM
 * trainer's step by step.
 *
 * @param microBatchesPerStep micro batches per optimizer step over all ranks: ranks × gradient_accumulation_steps
 */
public record WorkerPlan(Path folder, Path planFile, long totalSteps, long warmupSteps, int microBatchesPerStep,
        int microBatchesPerEpoch, Trainer.Run run) {

    public static final String FOLDER = "worker";
    /**
     * A full fine-tune's safetensors files are at most this size, as most Hugging Face models ship (transformers 4's
     * default; 5's writes 50 GB files): each file is created and hashed by one rank, so smaller files spread a save's
     * hashing over more ranks, and a download of one file stays short.
     */
    static final long MAX_FILE_BYTES = 5_000_000_000L;
    private static final String SCHEDULE = "schedule.safetensors";
    private static final String INITIAL_ADAPTER = "initial-adapter";

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

    /**
     * Writes plan.json, schedule.safetensors and (LoRA) initial-adapter/ under {@code output_dir/worker}.
     *
     * @param tokenizerDir the tokenizer's folder, whose files every checkpoint gets
     * @param resumeFrom the verified checkpoint to continue (WorkerCheckpoints.resumeFolder), or null
     */
    public static WorkerPlan write(ValidatedRecipe validated, Preprocess.Prepared data, Launch launch, Path modelDir,
            String modelIdentity, Path tokenizerDir, Path resumeFrom) {
        Recipe recipe = validated.recipe();
        int perStep = microBatchesPerStep(validated);
        int perEpoch = data.trainBatches();
        Trainer.Run run = run(recipe, perStep, perEpoch, modelIdentity);
        long total = run.schedule().totalSteps();
        long warmup = run.schedule().warmupSteps();
        Path outputDir = run.outputDir();
        Path folder = outputDir.resolve(FOLDER);
        Path schedule = folder.resolve(SCHEDULE);
        // On a multi-node run the first node writes the shared files; the others' workers cannot start before it
        // joined the rendezvous, which it does only after writing them.
        boolean writer = launch.nodeRank() == 0;
        if (writer) {
            writeSchedule(schedule, run, total, warmup, perStep, perEpoch);
        }

        if (recipe.adapter() instanceof AdapterSpec.Lora lora) {
            // a family the JVM trainer does not run has no Java-made initial adapter (otherFamilyAdapter)
            if (writer && ModelConfig.read(modelDir).notInJvmBecause() == null) {
                writeInitialAdapter(recipe, lora, modelDir, folder.resolve(INITIAL_ADAPTER));
            }
        }
        WorkerPlanFile plan = contents(validated, data.file(), perEpoch, modelDir, modelIdentity, tokenizerDir,
                resumeFrom);
        Path planFile = folder.resolve("plan.json");
        if (writer) {
            writeAtomically(planFile, plan.toJson());
        }
        return new WorkerPlan(folder, planFile, total, warmup, perStep, perEpoch, run);
    }

    /**
     * How the worker computes (finetune_worker.kernels): always the LM head inside the loss in chunks and per-document
     * attention without a dense mask, where the model allows (the worker says where it does not); the recipe's
     * speed keys, with {@code torch_compile: auto} decided for the run's device.
     */
    static WorkerPlanFile.Kernels kernels(Recipe.Speedups speedups, ResolvedRun resolved) {
        return new WorkerPlanFile.Kernels("chunked", "auto", speedups.liger(), speedups.activationOffloading(),
                speedups.compiles(resolved.device() == ResolvedRun.Device.CUDA), speedups.compileBackend(),
                speedups.compileMode());
    }

    /**
     * What {@link #write} puts into plan.json, computed without writing anything: the one place that fills each key.
     *
     * @param batches the preprocessed batches file
     * @param perEpoch training micro batches per epoch, as packed
     * @param modelIdentity the base model's identity in the resume key ({@code ModelSource.Resolved#key})
     */
    public static WorkerPlanFile contents(ValidatedRecipe validated, Path batches, int perEpoch, Path modelDir,
            String modelIdentity, Path tokenizerDir, Path resumeFrom) {
        Recipe recipe = validated.recipe();
        ResolvedRun resolved = validated.run();
        int perStep = microBatchesPerStep(validated);
        Trainer.Run run = run(recipe, perStep, perEpoch, modelIdentity);
        Path folder = run.outputDir().resolve(FOLDER);
        Map<String, String> invariants = new TreeMap<>(run.resumeInvariants());
        invariants.put("micro_batches_per_epoch", Integer.toString(perEpoch));
        invariants.put("micro_batches_per_step", Integer.toString(perStep));
        WorkerPlanFile.Adapter adapter = recipe.adapter() instanceof AdapterSpec.Lora lora
                ? adapter(recipe, lora, ModelConfig.read(modelDir), folder) : null;
        Recipe.Fsdp fsdp = recipe.distributed().fsdp();
        List<String> tokenizer = RunFiles.TOKENIZER_FILES.stream().map(tokenizerDir::resolve)
                .filter(Files::isRegularFile).map(WorkerPlan::absolute).toList();
        return new WorkerPlanFile(WorkerPlanFile.FORMAT,
                new WorkerPlanFile.Model(absolute(modelDir), resolved.bfloat16Compute() ? "bfloat16" : "float32",
                        // the regime the plan counted (ResolvedRun's one decision); tf32: auto is on, as Axolotl
                        // resolves it on GPUs that have TF32
                        resolved.precision().key(), recipe.precision().tf32() != Recipe.Flag.FALSE,
                        resolved.activationCheckpointing(), adapter, kernels(recipe.speedups(), resolved)),
                new WorkerPlanFile.Parallel(resolved.worldSize(), fsdp == null || fsdp.reshardAfterForward(),
                        fsdp != null && fsdp.offloadParams(), recipe.distributed().ddpTimeoutSeconds(),
                        layerClasses(fsdp)),
                new WorkerPlanFile.Data(absolute(batches), absolute(folder.resolve(SCHEDULE)), validated.plan().micro(),
                        perStep, perEpoch, absolute(folder.resolve("logs"))),
                new WorkerPlanFile.Training(run.schedule().totalSteps(), run.training().numEpochs(),
                        run.schedule().evalEvery(), run.schedule().saveEvery(), run.saveTotalLimit(),
                        run.schedule().logEvery(), run.training().seed(),
                        run.training().lossWatchdogThreshold() == null ? null : new WorkerPlanFile.LossWatchdog(
                                run.training().lossWatchdogThreshold(), run.training().lossWatchdogPatience())),
                // torch's AdamW or one of bitsandbytes' (WorkerRequirements refused the others)
                new WorkerPlanFile.Optimizer(WorkerRequirements.optimizer(recipe).axolotlName(),
                        run.training().adamBeta1(), run.training().adamBeta2(), run.training().adamEpsilon(), run.training().weightDecay(),
                        run.training().maxGradNorm()),
                objective(recipe, resolved.reference()),
                new WorkerPlanFile.Output(absolute(run.outputDir()), tokenizer,
                        resumeFrom != null ? absolute(resumeFrom) : null, ResumeKeys.hash(invariants),
                        recipe.output().saveOnlyModel(),
                        fsdp == null || !"SHARDED_STATE_DICT".equals(fsdp.stateDictType()), MAX_FILE_BYTES,
                        MemoryModel.SAVE_CHUNK_BYTES));
    }

    /** {@code transformer_layer_cls_to_wrap} as Axolotl writes it: one class name, or several separated by commas. */
    static List<String> layerClasses(Recipe.Fsdp fsdp) {
        String written = fsdp == null ? null : fsdp.transformerLayerClsToWrap();
        if (written == null || written.isBlank()) {
            return List.of();
        }
        return java.util.Arrays.stream(written.split(",")).map(String::strip).filter(n -> !n.isEmpty()).toList();
    }

    private static String absolute(Path path) {
        return path.toAbsolutePath().toString();
    }

    /** The objective's section of the plan, with the resolved reference model. */
    static WorkerPlanFile.Objective objective(Recipe recipe, ReferenceModel reference) {
        String token = reference instanceof ReferenceModel.AdapterDisabled ? "adapter_disabled"
                : reference instanceof ReferenceModel.FrozenAdapter ? "frozen_adapter"
                : reference instanceof ReferenceModel.StartingWeights ? "starting_weights" : "none";
        return recipe.objective().match(
                sft -> new WorkerPlanFile.Objective("sft", token, null, null),
                dpo -> {
                    List<WorkerPlanFile.DpoTerm> terms = new java.util.ArrayList<>();
                    for (int i = 0; i < dpo.lossTypes().size(); i++) {
                        terms.add(new WorkerPlanFile.DpoTerm(dpo.lossTypes().get(i).key(), dpo.lossWeights().get(i)));
                    }
                    return new WorkerPlanFile.Objective("dpo", token, new WorkerPlanFile.Dpo(dpo.beta(), terms), null);
                },
                grpo -> new WorkerPlanFile.Objective("grpo", token, null, new WorkerPlanFile.Grpo(
                        grpo.numGenerations(), grpo.maxCompletionLength(), grpo.temperature(),
                        grpo.sampling().topK(), grpo.sampling().topP(), grpo.sampling().minP(),
                        grpo.sampling().repetitionPenalty(), grpo.lossType().key(), grpo.epsilon(),
                        grpo.epsilonHigh(), grpo.delta(), grpo.beta(), grpo.biasCorrectedKl(),
                        grpo.maskTruncatedCompletions())));
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
     * The LoRA adapter the worker trains: the Java-made initial adapter, which the JVM trainer starts from too. A
     * family the JVM trainer does not run has none to share: the worker starts PEFT's own (A drawn from the seed,
     * B = 0) on exactly the targets the plan counted, by full name, or continues the saved PEFT adapter of
     * {@code lora_model_dir} as it is.
     */
    private static WorkerPlanFile.Adapter adapter(Recipe recipe, AdapterSpec.Lora lora, ModelConfig config,
            Path folder) {
        boolean doubleQuant = lora.quantized() && lora.quantization().doubleQuant();
        if (config.notInJvmBecause() == null) {
            return new WorkerPlanFile.Adapter("lora", absolute(folder.resolve(INITIAL_ADAPTER)), null, lora.quantized(),
                    doubleQuant, "uint8");
        }
        if (recipe.output().loraModelDir() != null) {
            return new WorkerPlanFile.Adapter("lora", absolute(Path.of(recipe.output().loraModelDir())), null,
                    lora.quantized(), doubleQuant, "uint8");
        }
        ModelParameters.PeftTargets targets = config.parameters().peftTargets(lora);
        if (!targets.parameters().isEmpty() && lora.dropout() > 0) {
            throw new IllegalStateException("validate refuses lora_dropout on expert LoRA (RunChecks)");
        }
        return new WorkerPlanFile.Adapter("lora", null, new WorkerPlanFile.PeftInit(lora.r(), lora.alpha(),
                lora.dropout(), lora.useRslora(), targets.modules(), targets.parameters()), lora.quantized(),
                doubleQuant, "uint8");
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
            AtomicFiles.publish(staging, folder);
        } catch (IOException e) {
            throw new UserError(folder.toString(), "cannot write the initial adapter: " + e.getMessage(),
                    "check that output_dir is writable", e);
        }
    }

    static void writeAtomically(Path file, String text) {
        try {
            AtomicFiles.writeString(file, text);
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
