package dev.finetune.trainers.backend;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.data.DataOptions;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.Batch;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.RecipeOptions;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.TrainingOptions;
import java.lang.management.ManagementFactory;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Runs an {@code rl:} recipe (the quickstarts) through {@link RlSetup} and the real loop, and prints the figures
 * the issue asks for: DPO's held-out preference accuracy and margin before and after, GRPO's mean reward over the
 * first and last tenth of the steps with the KL, and CPU time over wall time (the machine is shared).
 *
 * <p>Arguments: {@code recipe.yaml [--allow-commands] [key=value ...]}.
 */
public final class RlQuickstart {
    private RlQuickstart() {}

    public static void main(String[] args) throws Exception {
        long wallStart = System.nanoTime();
        List<String> overrides = new ArrayList<>();
        boolean allowCommands = false;
        for (int i = 1; i < args.length; i++) {
            if (args[i].equals("--allow-commands")) {
                allowCommands = true;
            } else {
                overrides.add(args[i]);
            }
        }
        Path recipePath = Path.of(args[0]);
        ValidatedRecipe validated = ValidatedRecipe.load(recipePath, overrides);
        Recipe recipe = validated.recipe();
        Path modelDir = recipePath.toAbsolutePath().getParent().resolve(recipe.model().baseModel()).normalize();
        Engine.getInstance();
        List<Map<String, Object>> lines = new ArrayList<>();
        try (NDManager manager = NDManager.newBaseManager(); Tokenizer tokenizer = Tokenizer.load(modelDir)) {
            AdapterSwitch adapters = null;
            LlamaModel model;
            if (recipe.adapter() instanceof AdapterSpec.Lora spec) {
                LoraFactory factory = new LoraFactory(spec, manager, recipe.training().seed());
                model = LlamaModel.load(modelDir, manager, LoadOptions.adapters(factory));
                adapters = factory.adapters();
            } else {
                model = LlamaModel.load(modelDir, manager, LoadOptions.fullFineTune());
            }
            LlamaTrainable trainable = new LlamaTrainable(model);
            DataOptions data = new DataOptions(recipe.training().sequenceLen(), false, false,
                    recipe.data().valSetSize(), recipe.training().seed(), DataOptions.ExcessLength.DROP, false,
                    recipe.model().chatTemplate(), recipe.model().chatTemplateJinja());
            try (RlSetup<?> setup = RlSetup.of(recipe, validated.plan().micro(), data, tokenizer, trainable, trainable,
                    adapters, allowCommands, manager)) {
                System.out.print(setup.report());
                TrainingOptions options = RecipeOptions.from(recipe, validated.plan().accumulation(),
                        setup.train().size(), "quickstart");
                Trainer.Listener listener = new Trainer.Listener() {
                    @Override
                    public void afterStep(long step, Map<String, Object> metrics) {
                        lines.add(metrics);
                    }
                };
                run(setup, trainable, options, manager, listener);
            }
        }
        double wall = (System.nanoTime() - wallStart) / 1e9;
        double cpu = ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime() / 1e9;
        report(lines);
        System.out.printf(Locale.ROOT, "time: %.1f s wall, %.1f s CPU (%.2f cores busy on average)%n", wall, cpu,
                cpu / wall);
    }

    private static <B extends Batch> void run(RlSetup<B> setup, LlamaTrainable model, TrainingOptions options,
            NDManager manager, Trainer.Listener listener) {
        new Trainer<>(model, setup.objective(), setup.train(), setup.eval(), options, manager, listener).run();
    }

    private static void report(List<Map<String, Object>> lines) {
        Map<String, Object> first = lines.get(0);
        Map<String, Object> last = lines.get(lines.size() - 1);
        if (first.containsKey("eval_rewards/accuracies")) {
            System.out.printf(Locale.ROOT, "held-out DPO (TRL metrics): accuracy %.3f -> %.3f, margin %.4f -> %.4f, "
                    + "eval loss %.4f -> %.4f%n", first.get("eval_rewards/accuracies"),
                    last.get("eval_rewards/accuracies"), first.get("eval_rewards/margins"),
                    last.get("eval_rewards/margins"), first.get("eval_loss"), last.get("eval_loss"));
        }
        List<Map<String, Object>> steps = lines.stream().filter(l -> l.containsKey("reward")).toList();
        if (!steps.isEmpty()) {
            int tenth = Math.max(1, steps.size() / 10);
            System.out.printf(Locale.ROOT, "GRPO mean reward: first %d steps %.3f, last %d steps %.3f; kl over the "
                    + "last %d steps %.4f; steps %d%n", tenth, mean(steps.subList(0, tenth), "reward"), tenth,
                    mean(steps.subList(steps.size() - tenth, steps.size()), "reward"), tenth,
                    mean(steps.subList(steps.size() - tenth, steps.size()), "kl"), steps.size());
            if (first.containsKey("eval_reward")) {
                System.out.printf(Locale.ROOT, "held-out reward: %.3f -> %.3f%n", first.get("eval_reward"),
                        last.get("eval_reward"));
            }
        }
    }

    private static double mean(List<Map<String, Object>> lines, String key) {
        return lines.stream().mapToDouble(l -> ((Number) l.get(key)).doubleValue()).average().orElse(Double.NaN);
    }
}
