package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Scalar;
import java.nio.file.Path;
import java.util.List;

/**
 * What the run writes and when: {@code output_dir}, checkpoints, resume, evaluation and logging intervals.
 */
final class OutputSection {
    private final Problems problems;
    private final Path recipeDir;

    OutputSection(Problems problems, Path recipeDir) {
        this.problems = problems;
        this.recipeDir = recipeDir;
    }

    Recipe.Output output(KeyReader top, Recipe.Data data, AdapterSpec adapter, Recipe.Objective objective) {
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
        Resume resume = new Resume.Fresh();
        if (resumeNode instanceof Scalar r && r.value() instanceof Boolean b) {
            resume = b ? new Resume.Newest() : new Resume.Fresh();
        } else if (resumeNode instanceof Scalar r && r.value() != null && !r.text().isBlank()) {
            resume = r.text().equalsIgnoreCase("true") ? new Resume.Newest() : r.text().equalsIgnoreCase("false")
                    ? new Resume.Fresh() : new Resume.From(java.nio.file.Path.of(r.text()));
        } else if (resumeNode != null && !(resumeNode instanceof Scalar)) {
            problems.error(resumeNode.where(), "resume_from_checkpoint must be true or a checkpoint folder, got "
                    + YamlNode.describe(resumeNode), "write resume_from_checkpoint: true");
        }
        if (top.bool("auto_resume_from_checkpoints") && resume instanceof Resume.Fresh) {
            resume = new Resume.Newest();
        }
        String loraModelDir = top.string("lora_model_dir", null);
        if (loraModelDir != null && adapter instanceof AdapterSpec.Full) {
            problems.error(top.at("lora_model_dir"), "lora_model_dir loads a saved adapter, but the recipe has no "
                    + "adapter: (a full fine-tune)", "add adapter: lora with the rank and targets the adapter was "
                    + "trained with, or remove lora_model_dir");
        }
        SaveStrategy saveStrategy = top.choice("save_strategy", null, SaveStrategy.class);
        Double saveSteps = top.number("save_steps", null, Double.MIN_VALUE, Double.MAX_VALUE);
        Integer savesPerEpoch = top.integer("saves_per_epoch", null, 0);
        int saveTotalLimit = top.integer("save_total_limit", 1);
        EvalStrategy evalStrategy = top.choice("eval_strategy", null, EvalStrategy.class);
        Double evalSteps = top.number("eval_steps", null, Double.MIN_VALUE, Double.MAX_VALUE);
        Integer evalsPerEpoch = top.integer("evals_per_epoch", null, 0);
        Integer loggingSteps = top.integer("logging_steps", null, 1);
        Integer patience = top.integer("early_stopping_patience", null, 1);
        String metric = top.string("metric_for_best_model", null);
        Boolean greaterIsBetter = top.bool("greater_is_better", null);
        boolean loadBest = top.bool("load_best_model_at_end");
        if (saveSteps != null && savesPerEpoch != null) {
            problems.error(top.at("saves_per_epoch"), "save_steps and saves_per_epoch are both set", "keep only one of them");
        }
        if (evalSteps != null && evalsPerEpoch != null) {
            problems.error(top.at("evals_per_epoch"), "eval_steps and evals_per_epoch are both set", "keep only one of them");
        }
        if (saveSteps != null && saveStrategy != null && saveStrategy != SaveStrategy.STEPS) {
            problems.error(top.at("save_strategy"), "save_steps needs save_strategy: steps, but it is " + saveStrategy.key(),
                    "remove save_strategy or set it to steps");
        }
        if (evalSteps != null && evalStrategy != null && evalStrategy != EvalStrategy.STEPS) {
            problems.error(top.at("eval_strategy"), "eval_steps needs eval_strategy: steps, but it is " + evalStrategy.key(),
                    "remove eval_strategy or set it to steps");
        }
        if (evalsPerEpoch != null && evalStrategy != null && evalStrategy != EvalStrategy.STEPS) {
            problems.error(top.at("eval_strategy"), "evals_per_epoch needs eval_strategy: steps (or none), but it is " + evalStrategy.key(),
                    "remove eval_strategy");
        }
        if (saveStrategy == SaveStrategy.BEST && metric == null) {
            problems.error(top.at("save_strategy"), "save_strategy: best needs metric_for_best_model",
                    "add metric_for_best_model: eval_loss");
        }
        boolean evalData = data.valSetSize() > 0 || !data.testDatasets().isEmpty();
        if (!evalData && (evalSteps != null || (evalStrategy != null && evalStrategy != EvalStrategy.NO))) {
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
        BestModel best = best(top, objective, metric, greaterIsBetter, patience, loadBest, saveStrategy, saveSteps,
                evalSteps, evalData);
        return new Recipe.Output(outputDir, resume, loraModelDir, saveStrategy, saveSteps, savesPerEpoch,
                saveTotalLimit, evalStrategy, evalSteps, evalsPerEpoch, loggingSteps, best,
                top.bool("overwrite_output_dir"), top.bool("use_tensorboard"), top.bool("save_only_model"));
    }

    /**
     * The metric that save_strategy: best, early stopping and load_best_model_at_end watch, with HF's rules: the
     * metric must be one the objective's evaluation writes, {@code eval_} is optional, a loss is better lower;
     * loading the best checkpoint needs a checkpoint at every evaluation that can be the best.
     */
    private BestModel best(KeyReader top, Recipe.Objective objective, String metric, Boolean greaterIsBetter,
            Integer patience, boolean loadBest, SaveStrategy saveStrategy, Double saveSteps, Double evalSteps,
            boolean evalData) {
        boolean saveBest = saveStrategy == SaveStrategy.BEST;
        boolean loadAtEnd = loadBest || patience != null;
        if (!saveBest && !loadAtEnd) {
            for (String key : new String[] {"metric_for_best_model", "greater_is_better"}) {
                if (top.has(key)) {
                    problems.warn(top.at(key), key + " has no effect without save_strategy: best, "
                            + "load_best_model_at_end or early_stopping_patience", "remove it, or add one of those");
                }
            }
            return null;
        }
        if (!evalData) {
            String key = patience != null ? "early_stopping_patience" : loadBest ? "load_best_model_at_end" : "save_strategy";
            problems.error(top.at(key), key + " compares evaluations, but there is no evaluation data (val_set_size is 0 "
                    + "and no test_datasets)", "set val_set_size: 0.05 or add test_datasets");
        }
        String name = metric == null ? "loss" : metric.startsWith("eval_") ? metric.substring("eval_".length()) : metric;
        List<String> known = BestModel.METRICS.get(objective.key());
        if (!known.contains(name)) {
            String close = Suggestions.closest(name, known);
            problems.error(top.at("metric_for_best_model"), "metric_for_best_model '" + metric + "' is not a metric "
                    + (objective.key().equals("sft") ? "supervised fine-tuning" : "rl: " + objective.key())
                    + " evaluates", close != null ? "did you mean '" + close + "'?" : "use one of " + String.join(", ", known));
            name = "loss";
        }
        if (loadBest && patience == null && !saveBest && !(saveSteps != null && evalSteps != null && saveSteps >= 1
                && evalSteps >= 1 && saveSteps % evalSteps == 0)) {
            problems.error(top.at("load_best_model_at_end"), "load_best_model_at_end needs a checkpoint at evaluations: "
                    + "save_steps a multiple of eval_steps (or save_strategy: best)",
                    "add e.g. eval_steps: 50 and save_steps: 100, or save_strategy: best");
        }
        return new BestModel(name, greaterIsBetter != null ? greaterIsBetter : !name.endsWith("loss"), patience, loadAtEnd);
    }
}
