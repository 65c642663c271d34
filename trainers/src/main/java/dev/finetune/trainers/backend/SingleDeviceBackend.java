package dev.finetune.trainers.backend;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ReferenceModel;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.model.ConfigOverrides;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.ResumeInvariants;
import dev.finetune.recipes.SchedulePlan;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.hub.HubModels;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.Batch;
import dev.finetune.trainers.train.ResumePoint;
import dev.finetune.trainers.train.Trainer;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * {@code backend: single}: the whole run in this JVM on one device, from a validated recipe to the output folder.
 *
 * <p>Everything that can be wrong with the input (model folder, tokenizer, every dataset row, LoRA targets,
 * schedule and optimizer names) is checked before {@code output_dir} is touched, so bad input never leaves a
 * half-written run behind.
 */
public final class SingleDeviceBackend {
    private static final Logger LOG = LogManager.getLogger(SingleDeviceBackend.class);

    /**
     * @param samplePrompt the text of the before/after sample, or {@code null} to take it from the data
     * @param allowCommands the user passed {@code --allow-commands}: GRPO reward commands named in the recipe may run
     * @param plan the recipe's memory and time plan, printed next to what the first steps measure; or {@code null}
     * @param out where the data report, the adapter summary, samples and the result go (the progress is logged)
     */
    public record Settings(String samplePrompt, boolean allowCommands, PrintWriter out, RunPlan plan) {
        /** Without a plan: nothing to compare the first steps with. */
        public Settings(String samplePrompt, boolean allowCommands, PrintWriter out) {
            this(samplePrompt, allowCommands, out, null);
        }
    }

    /** What a finished run reports. */
    public record Result(Path outputDir, Trainer.Summary summary, String sampleBefore, String sampleAfter) {}

    private SingleDeviceBackend() {}

    /**
     * One run for every objective: tokenizer, model, the objective's data and batches, checks, then the loop and
     * the saved result. Nothing is written before every check has passed.
     */
    public static Result train(ValidatedRecipe validated, Settings settings) {
        StartupClock clock = StartupClock.sinceLaunch();
        Recipe recipe = validated.recipe();
        PrintWriter out = settings.out();
        if (validated.run().backend() != ResolvedRun.Backend.SINGLE) {
            throw new IllegalArgumentException("the recipe resolved to the " + validated.run().backend() + " backend");
        }
        // the quick answer about output_dir, before data and model are loaded; claimOutput checks again under its lock
        OutputFolder.check(Path.of(recipe.output().outputDir()), inputs(validated), resuming(recipe),
                recipe.output().overwriteOutputDir());
        CheckpointWriter.SINGLE.requireCanResume(Path.of(recipe.output().outputDir()), recipe.output().resume());
        // what this trainer refuses (optimizers, model families) or leaves unused (dataset_prepared_path) validate
        // said already: RunChecks
        if (!recipe.model().configOverrides().isEmpty()) {
            // validate asks this too when the model's config.json is at hand; a hub model's is here only now
            String unread = ConfigOverrides.jvmRefusal(ModelConfig.json(HubModels.resolve(recipe.model()).folder()),
                    recipe.model().configOverrides());
            if (unread != null) {
                throw new UserError("overrides_of_model_config", unread, ConfigOverrides.JVM_HINT);
            }
        }
        Path modelDir = HubModels.base(recipe.model());
        Engine.getInstance();
        clock.lap("engine");
        try (Tokenizer tokenizer = Tokenizer.load(HubModels.tokenizer(recipe.model()));
                NDManager manager = NDManager.newBaseManager()) {
            BuiltModel built = BuiltModel.forTraining(validated, modelDir, manager);
            tokenizer.limitTo(built.model().config().vocabSize(), modelDir.resolve("config.json").toString());
            if (recipe.output().loraModelDir() != null) {
                built.weights().loadAdapter(built.model(), Path.of(recipe.output().loraModelDir()), manager);
                if (validated.run().reference() instanceof ReferenceModel.FrozenAdapter) {
                    // continuing a saved adapter (SFT -> DPO): TRL's reference is a frozen copy of it, not the base
                    built.weights().freezeReference();
                    out.printf(Locale.ROOT, "reference: the adapter from lora_model_dir %s, frozen as it starts "
                            + "(TRL's \"ref\" adapter); the policy starts equal to it%n", recipe.output().loraModelDir());
                }
            }
            out.print(built.describe());
            clock.lap("tokenizer and model");
            try (ObjectiveSetup<?> setup = ObjectiveSetup.of(recipe, validated.plan().micro(), tokenizer, built,
                    settings.samplePrompt(), settings.allowCommands(), manager)) {
                out.print(setup.report());
                clock.lap("data");
                return run(validated, setup, built, tokenizer, manager, out, settings.plan(), clock);
            }
        }
    }

    private static <B extends Batch> Result run(ValidatedRecipe validated, ObjectiveSetup<B> setup, BuiltModel built,
            Tokenizer tokenizer, NDManager manager, PrintWriter out, RunPlan plan, StartupClock clock) {
        Recipe recipe = validated.recipe();
        SchedulePlan schedule = SchedulePlan.of(recipe, validated.plan().accumulation(), setup.train().size(), false);
        Provenance.ModelIdentity model = Provenance.ModelIdentity.of(HubModels.resolve(recipe.model()));
        Trainer.Run run = Trainer.Run.of(recipe, schedule, DatasetIdentity.of(recipe.data().datasets()), model.key());
        ResumePoint.requireResumable(run, setup.train().size());
        out.printf(Locale.ROOT, "training: %d micro batches per epoch%s, %d optimizer steps (warm-up %d), eval on %d "
                + "micro batches%n", setup.train().size(), recipe.training().samplePacking() ? " (as packed)" : "",
                schedule.totalSteps(), schedule.warmupSteps(), setup.eval().size());
        String before = setup.sample() == null ? "" : setup.sample().text(built.model(), tokenizer);
        if (setup.sample() != null) {
            out.println("sample before training: " + quoted(before));
            clock.lap("sample before training");
        }
        Path outputDir = run.outputDir();
        try (OutputFolder claimed = claimOutput(validated, run, setup.train().size(), model)) {
            RunFiles.start(outputDir, validated, tokenizer.directory());
            List<Map<String, Object>> lines = new ArrayList<>();
            EstimateReport report = new EstimateReport(plan, out, schedule.totalSteps());
            Trainer.Summary summary = new Trainer<>(built.trainable(), setup.objective(), setup.train(), setup.eval(),
                    run, manager, new Trainer.Listener() {
                        @Override
                        public Map<String, Object> firstStep(Map<String, Object> line) {
                            clock.lap("first step");
                            out.println(clock.line());
                            return report.firstStep(line);
                        }

                        @Override
                        public void afterStep(long step, Map<String, Object> metrics) {
                            if (step == 0) {
                                clock.lap("evaluation before training");
                            }
                            lines.add(metrics);
                            report.afterStep(step, metrics);
                        }

                        @Override
                        public void checkpointFiles(Path folder) throws java.io.IOException {
                            built.writeCheckpointFiles(folder, recipe, tokenizer.directory());
                        }
                    }).run();
            built.trainable().setTraining(false);
            built.save(outputDir, recipe);
            String after = "";
            if (setup.sample() != null) {
                try {
                    after = setup.sample().text(built.model(), tokenizer);
                    out.println("sample after training:  " + quoted(after));
                } catch (dev.finetune.trainers.generation.NonFiniteLogits e) {
                    // stop_on_nonfinite: false trained on through NaN as asked; the weights are saved, no sample exists
                    out.println("sample after training:  none (" + e.getMessage() + ")");
                }
            }
            out.print(outcome(lines, summary));
            out.printf(Locale.ROOT, "saved %s to %s%n", built.weights().savedWhat(), outputDir);
            return new Result(outputDir, summary, before, after);
        }
    }

    /**
     * Takes {@code output_dir} for this run (see {@link OutputFolder}): called after every input check passed and
     * before the first file is written.
     */
    static OutputFolder claimOutput(ValidatedRecipe validated, Trainer.Run run, int microBatchesPerEpoch,
            Provenance.ModelIdentity model) {
        Recipe recipe = validated.recipe();
        // The resolved text is the one RunFiles writes next, so its hash names that file.
        Provenance provenance = Provenance.of(validated, validated.flatten(run.outputDir()), model);
        return OutputFolder.claim(new OutputFolder.Claim(run.outputDir(), inputs(validated),
                ResumePoint.keys(run, microBatchesPerEpoch), ResumeInvariants.adjustable(recipe), resuming(recipe),
                recipe.output().overwriteOutputDir(), provenance.toJson()));
    }

    public static boolean resuming(Recipe recipe) {
        return !(recipe.output().resume() instanceof dev.finetune.recipes.Resume.Fresh);
    }

    /** Every local file or folder the run reads, by the key that names it: output_dir may be none of them. */
    public static Map<Path, String> inputs(ValidatedRecipe validated) {
        Recipe recipe = validated.recipe();
        Map<Path, String> inputs = new LinkedHashMap<>();
        for (Path recipeFile : Provenance.recipeFiles(validated.tree())) {
            inputs.put(recipeFile, "the recipe");
        }
        addIfLocal(inputs, recipe.model().baseModel(), "base_model");
        addIfLocal(inputs, recipe.model().baseModelConfig(), "base_model_config");
        addIfLocal(inputs, recipe.model().tokenizerConfig(), "tokenizer_config");
        addIfLocal(inputs, recipe.output().loraModelDir(), "lora_model_dir");
        for (DatasetSpec dataset : recipe.data().datasets()) {
            if (dataset.local()) {
                inputs.put(dataset.path(), "datasets");
            }
        }
        for (DatasetSpec dataset : recipe.data().testDatasets()) {
            if (dataset.local()) {
                inputs.put(dataset.path(), "test_datasets");
            }
        }
        return inputs;
    }

    private static void addIfLocal(Map<Path, String> inputs, String name, String key) {
        if (name != null && !name.isBlank() && Files.exists(Path.of(name))) {
            inputs.put(Path.of(name), key);
        }
    }

    /**
     * SFT: the held-out loss at the first and last evaluation. DPO: held-out {@code rewards/accuracies} and {@code rewards/margins} at the first and last evaluation.
     * GRPO: mean reward over the first and the last tenth of the steps (this run's steps, after a resume), the
     * KL at the end (when beta is not 0: TRL logs none then), and the held-out reward.
     */
    static String outcome(List<Map<String, Object>> lines, Trainer.Summary summary) {
        StringBuilder s = new StringBuilder();
        boolean rl = lines.stream().anyMatch(l -> l.containsKey("reward") || l.containsKey("eval_rewards/accuracies"));
        if (!rl && !Double.isNaN(summary.firstEvalLoss())) {
            s.append(String.format(Locale.ROOT, "eval loss: %.4f -> %.4f (%+.1f%%)%n", summary.firstEvalLoss(),
                    summary.lastEvalLoss(), 100 * (summary.lastEvalLoss() / summary.firstEvalLoss() - 1)));
        }
        List<Map<String, Object>> evals = lines.stream().filter(l -> l.containsKey("eval_loss")).toList();
        if (evals.size() >= 2 && evals.get(0).containsKey("eval_rewards/accuracies")) {
            Map<String, Object> first = evals.get(0);
            Map<String, Object> last = evals.get(evals.size() - 1);
            s.append(String.format(Locale.ROOT, "held-out preference: accuracy %.3f -> %.3f, margin %.4f -> %.4f, "
                    + "loss %.4f -> %.4f (step %s -> %s)%n", first.get("eval_rewards/accuracies"),
                    last.get("eval_rewards/accuracies"), first.get("eval_rewards/margins"),
                    last.get("eval_rewards/margins"), first.get("eval_loss"), last.get("eval_loss"), first.get("step"),
                    last.get("step")));
        }
        List<Map<String, Object>> steps = lines.stream().filter(l -> l.containsKey("reward")).toList();
        if (!steps.isEmpty()) {
            int tenth = Math.max(1, steps.size() / 10);
            List<Map<String, Object>> tail = steps.subList(steps.size() - tenth, steps.size());
            s.append(String.format(Locale.ROOT, "reward: %.3f over the first %d steps -> %.3f over the last %d%s%n",
                    mean(steps.subList(0, tenth), "reward"), tenth, mean(tail, "reward"), tenth,
                    tail.get(0).containsKey("kl") ? String.format(Locale.ROOT, "; kl %.4f at the end", mean(tail, "kl"))
                            : ""));
            if (evals.size() >= 2 && evals.get(0).containsKey("eval_reward")) {
                s.append(String.format(Locale.ROOT, "held-out reward: %.3f -> %.3f%n", evals.get(0).get("eval_reward"),
                        evals.get(evals.size() - 1).get("eval_reward")));
            }
        }
        return s.toString();
    }

    private static double mean(List<Map<String, Object>> lines, String key) {
        return lines.stream().mapToDouble(l -> ((Number) l.get(key)).doubleValue()).average().orElse(Double.NaN);
    }

    private static String quoted(String text) {
        return "\"" + text.replace("\n", "\\n") + "\"";
    }
}
