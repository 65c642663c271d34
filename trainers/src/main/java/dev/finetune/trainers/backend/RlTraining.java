package dev.finetune.trainers.backend;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.Batch;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.RecipeOptions;
import dev.finetune.trainers.train.TrainableModel;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.TrainingOptions;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code rl: dpo|grpo} on the single-device backend: the same model building, checks-before-writing, loop and
 * saving as SFT, with {@link RlSetup} choosing the objective and its batches. Prints the held-out figures that
 * tell whether it worked: DPO's preference accuracy and margin, GRPO's reward and KL.
 */
final class RlTraining {
    private RlTraining() {}

    static SingleDeviceBackend.Result train(ValidatedRecipe validated, SingleDeviceBackend.Settings settings) {
        Recipe recipe = validated.recipe();
        PrintWriter out = settings.out();
        Path modelDir = SingleDeviceBackend.localModel(recipe.model().baseModel());
        Engine.getInstance();
        try (Tokenizer tokenizer = Tokenizer.load(recipe.model().tokenizerConfig() != null
                ? SingleDeviceBackend.localModel(recipe.model().tokenizerConfig()) : modelDir);
                NDManager manager = NDManager.newBaseManager()) {
            BuiltModel built = BuiltModel.forTraining(recipe, modelDir, manager);
            if (recipe.output().loraModelDir() != null) {
                // continuing a saved adapter (SFT -> DPO): TRL's reference is a frozen copy of it, not the base
                built.loadAdapter(Path.of(recipe.output().loraModelDir()), manager);
                built.freezeReference();
                out.printf(Locale.ROOT, "reference: the adapter from lora_model_dir %s, frozen as it starts (TRL's "
                        + "\"ref\" adapter); the policy starts equal to it%n", recipe.output().loraModelDir());
            }
            out.print(built.describe());
            try (RlSetup<?> setup = RlSetup.of(recipe, validated.plan().micro(),
                    SingleDeviceBackend.dataOptions(recipe), tokenizer, built.trainable(),
                    new LlamaTrainable(built.model()), built.adapters(), settings.allowCommands(), manager)) {
                out.print(setup.report());
                TrainingOptions options = RecipeOptions.from(recipe, validated.plan().accumulation(),
                        setup.train().size(), DatasetIdentity.of(recipe.data().datasets()));
                Trainer.requireResumable(options, setup.train().size());
                out.printf(Locale.ROOT, "training: %d micro batches per epoch, %d optimizer steps, eval on %d micro "
                        + "batches%n", setup.train().size(), Trainer.totalSteps(options, setup.train().size()),
                        setup.eval().size());
                Path outputDir = options.outputDir();
                try (OutputFolder claimed = SingleDeviceBackend.claimOutput(validated, options, setup.train().size())) {
                    RunFiles.start(outputDir, validated, tokenizer.directory());
                    List<Map<String, Object>> lines = new ArrayList<>();
                    EstimateReport report = new EstimateReport(settings.plan(), out,
                            Trainer.totalSteps(options, setup.train().size()));
                    Trainer.Summary summary = run(setup, built.trainable(), options, manager, new Trainer.Listener() {
                        @Override
                        public Map<String, Object> firstStep(Map<String, Object> line) {
                            return report.firstStep(line);
                        }

                        @Override
                        public void afterStep(long step, Map<String, Object> metrics) {
                            lines.add(metrics);
                            report.afterStep(step, metrics);
                        }

                        @Override
                        public void checkpointFiles(Path folder) throws java.io.IOException {
                            built.writeCheckpointFiles(folder, recipe, tokenizer.directory());
                        }
                    });
                    built.trainable().setTraining(false);
                    built.save(outputDir, recipe);
                    out.print(outcome(lines));
                    out.printf(Locale.ROOT, "saved %s to %s%n", built.savedWhat(), outputDir);
                    return new SingleDeviceBackend.Result(outputDir, summary, "", "");
                }
            }
        }
    }

    private static <B extends Batch> Trainer.Summary run(RlSetup<B> setup, TrainableModel<?> model,
            TrainingOptions options, NDManager manager, Trainer.Listener listener) {
        return new Trainer<>(model, setup.objective(), setup.train(), setup.eval(), options, manager, listener).run();
    }

    /**
     * DPO: held-out {@code rewards/accuracies} and {@code rewards/margins} at the first and last evaluation.
     * GRPO: mean reward over the first and the last tenth of the steps (this run's steps, after a resume), the
     * KL at the end (when beta is not 0: TRL logs none then), and the held-out reward.
     */
    static String outcome(List<Map<String, Object>> lines) {
        StringBuilder s = new StringBuilder();
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
}
