package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ReferenceModel;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.backend.CheckpointWriter;
import dev.finetune.trainers.backend.OutputFolder;
import dev.finetune.trainers.backend.Provenance;
import dev.finetune.trainers.backend.RunFiles;
import dev.finetune.trainers.backend.SingleDeviceBackend;
import dev.finetune.trainers.hub.HubModels;
import dev.finetune.trainers.train.Trainer;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code backend: fsdp}: the recipe trained by the Python worker under torchrun, FSDP2 over the ranks (ARCHITECTURE.md:
 * the fsdp worker). This side validates, preprocesses, writes the worker's plan, starts torchrun, and turns the ranks'
 * JSON lines into the same progress display, {@code metrics.jsonl} and {@code loss.png} as the single-device trainer.
 */
public final class FsdpBackend {
    /**
     * @param plan the recipe's memory and time plan: its per-device peak is set beside each rank's measured peak
     *     after the first step, its speed beside the measured one; or null
     * @param environment added to the ranks' environment (the failure drills of the tests use it)
     * @param allowCommands the user passed {@code --allow-commands}: GRPO reward commands named in the recipe may run
     */
    public record Settings(Launch launch, RunPlan plan, PrintWriter out, Map<String, String> environment,
            boolean allowCommands) {
        public Settings(Launch launch, RunPlan plan, PrintWriter out) {
            this(launch, plan, out, Map.of(), false);
        }

        public Settings(Launch launch, RunPlan plan, PrintWriter out, Map<String, String> environment) {
            this(launch, plan, out, environment, false);
        }
    }

    /** What a finished run reports. */
    public record Result(Path outputDir, long steps, double lastLoss, double firstEvalLoss, double lastEvalLoss,
            List<Map<String, Object>> rankPeaks, List<String> savedFiles) {}

    /** A rank failed or torchrun gave up: the run failed, with the first rank's own error when it sent one. */
    public static final class WorkerFailed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        WorkerFailed(String message) {
            super(message);
        }
    }

    private FsdpBackend() {}

    /** {@code --dry-run}: the exact command, environment and global batch identity; nothing starts. */
    public static String dryRun(ValidatedRecipe validated, Launch launch, String python) {
        return DryRun.render(validated, launch, python);
    }

    public static Result train(ValidatedRecipe validated, Settings settings) {
        Recipe recipe = validated.recipe();
        PrintWriter out = settings.out();
        Launch launch = settings.launch();
        if (!launch.run().equals(validated.run())) {
            throw new IllegalArgumentException("the launch is for " + launch.run() + ", the recipe resolved to "
                    + validated.run());
        }
        RewardChannel.requireAllowed(recipe, settings.allowCommands());
        Path modelDir = HubModels.base(recipe.model());
        Path tokenizerDir = HubModels.tokenizer(recipe.model());
        Path outputDir = Path.of(recipe.output().outputDir());
        Path workerFolder = outputDir.resolve(WorkerPlan.FOLDER);
        String python = WorkerPython.find(launch.python(), System.getenv(), System.getProperty("finetune.home"));
        // (objectives and DPO loss types the worker lacks validate refused already, by its capabilities.json)
        WorkerPython.Environment environment = WorkerPython.check(python);
        // CUDA where the resolved run says (a declared GPU the interpreter cannot see is refused here)
        boolean cpu = launch.cpu();
        WorkerRequirements.check(recipe, environment, python, !cpu);
        if (!cpu && validated.run().bfloat16Compute() && !environment.bf16()) {
            throw new UserError("bf16", "the run computes in bfloat16 on CUDA (bf16: true or auto), but these GPUs "
                    + "have no bfloat16", "set bf16: false");
        }
        if (!cpu && launch.nprocPerNode() > environment.cudaDevices()) {
            throw new UserError("--nproc-per-node", launch.nprocPerNode() + " processes per node, but this node has "
                    + environment.cudaDevices() + " CUDA device(s)", "--nproc-per-node " + environment.cudaDevices());
        }
        out.printf(Locale.ROOT, "%s: %s (Python %s; torch %s, transformers %s, peft %s), %d rank%s on %s%n",
                launch.direct() ? "torch worker" : "fsdp", environment.executable(), environment.python(),
                environment.packages().get("torch"), environment.packages().get("transformers"),
                environment.packages().get("peft"), launch.worldSize(), launch.worldSize() == 1 ? " (one process, "
                        + "no torchrun, no FSDP)" : "s", cpu ? (launch.direct() ? "CPU" : "CPU (gloo)")
                        : environment.cudaDevices() + " CUDA device(s)" + (environment.cudaNames().isEmpty() ? ""
                                : " (" + environment.cudaNames().get(0) + ")"));

        // The first node owns output_dir as a single-device run does (OutputFolder): the quick answer now, the
        // claim under the OS lock once the data is packed (its batch count is part of the folder's recipe hash).
        boolean owner = launch.nodeRank() == 0;
        Path resumeFrom = null;
        if (owner) {
            OutputFolder.check(outputDir, SingleDeviceBackend.inputs(validated), SingleDeviceBackend.resuming(recipe),
                    recipe.output().overwriteOutputDir());
            CheckpointWriter.FSDP.requireCanResume(outputDir, recipe.output().resume());
            // a checkpoint that cannot be resumed is refused before preprocess and the claim write anything
            resumeFrom = WorkerCheckpoints.resumeFolder(recipe.output().resume(), outputDir,
                    folder -> WorkerPython.checkpointProblem(python, folder));
        }
        if (validated.run().reference() instanceof ReferenceModel.FrozenAdapter frozen) {
            out.printf(Locale.ROOT, "reference: the adapter from lora_model_dir %s, frozen as it starts (TRL's \"ref\" "
                    + "adapter; %s); the policy starts equal to it%n", frozen.loraModelDir(),
                    recipe.objective() instanceof Recipe.Objective.Dpo
                            ? "its log-probabilities are taken once before the first step"
                            : "each rank keeps its shards of it and swaps them in for the KL term's pass");
        }
        Preprocess.Prepared data = Preprocess.run(validated, out);
        Provenance.ModelIdentity model = Provenance.ModelIdentity.of(HubModels.resolve(recipe.model()));
        try (OutputFolder claimed = owner ? claim(validated, data, launch, model) : null) {
            // checked again under the lock, before the ranks start: nothing changed it since
            if (resumeFrom != null) {
                WorkerCheckpoints.verify(resumeFrom);
            }
            WorkerPlan plan = WorkerPlan.write(validated, data, launch, modelDir, model.key(), tokenizerDir,
                    resumeFrom);
            if (owner) {
                RunFiles.start(outputDir, validated, tokenizerDir);
            }
            out.printf(Locale.ROOT, "training: %d micro batches per epoch (as packed), %d optimizer steps of %d micro "
                    + "batches over %d rank%s, eval on %d micro batches%n", plan.microBatchesPerEpoch(),
                    plan.totalSteps(), plan.microBatchesPerStep(), launch.worldSize(), launch.worldSize() == 1 ? ""
                            : "s", data.evalBatches());

            Map<String, String> env = new LinkedHashMap<>(launch.environment(
                    Runtime.getRuntime().availableProcessors(), System.getenv()));
            // the ranks stop when this process is gone, however it went: no orphan writes into a folder whose lock
            // died with it
            env.put("FINETUNE_LAUNCHER_PID", Long.toString(ProcessHandle.current().pid()));
            Trainer.Run schedule = plan.run();
            try (WorkerPython.Code code = WorkerPython.privateCopy();
                    RewardChannel rewards = RewardChannel.open(validated, tokenizerDir, settings.allowCommands())) {
                List<String> command = launch.command(python, code.entry(), plan.planFile().toAbsolutePath(),
                        workerFolder.resolve("logs").toAbsolutePath(), Launch.runId(recipe));
                return rewards == null ? Torchrun.run(command, env, outputDir, launch, settings, schedule)
                        : rewards.around(env, ranks -> Torchrun.run(command, ranks, outputDir, launch, settings, schedule));
            }
        }
    }

    /** Takes output_dir for this run, with the same recipe hash the single-device run of this recipe would record. */
    private static OutputFolder claim(ValidatedRecipe validated, Preprocess.Prepared data, Launch launch,
            Provenance.ModelIdentity model) {
        Recipe recipe = validated.recipe();
        Path outputDir = Path.of(recipe.output().outputDir());
        dev.finetune.trainers.train.Trainer.Run run = WorkerPlan.run(recipe,
                WorkerPlan.microBatchesPerStep(validated), data.trainBatches(), model.key());
        Provenance provenance = Provenance.of(validated, validated.flatten(outputDir), model);
        return OutputFolder.claim(new OutputFolder.Claim(outputDir, SingleDeviceBackend.inputs(validated),
                dev.finetune.trainers.train.ResumePoint.keys(run, data.trainBatches()),
                dev.finetune.recipes.ResumeInvariants.adjustable(recipe), SingleDeviceBackend.resuming(recipe),
                recipe.output().overwriteOutputDir(), provenance.toJson()));
    }
}
