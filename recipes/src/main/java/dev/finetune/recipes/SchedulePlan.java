package dev.finetune.recipes;

import java.util.Locale;

/**
 * When things happen in a run, derived from the recipe and the number of micro batches in one epoch: total optimizer
 * steps, warm-up, and the evaluation, checkpoint and logging intervals, with the HF Trainer's and Axolotl's
 * resolution rules. Pure: {@code validate} computes it from the rows it counted, the trainer from the batches it
 * built, with this one function.
 *
 * @param accumulation micro batches per optimizer step ({@link BatchPlan#accumulation()})
 * @param microBatchesPerEpoch micro batches of one data-parallel rank in one epoch
 * @param stepsPerEpoch optimizer steps in one epoch (at least 1)
 * @param totalSteps {@code max_steps}, else {@code ceil(num_epochs × micro batches / accumulation)}
 * @param warmupSteps {@code warmup_steps}, else {@code ceil(warmup_ratio × total)}, else Axolotl's
 *     {@code min(100, 3 % of total)}
 * @param evalEvery steps between evaluations; 0: only before the first and after the last step
 * @param saveEvery steps between checkpoints; 0: none
 * @param logEvery {@code logging_steps}: steps between logged lines (1 when not written)
 * @param estimated counted from dataset rows before tokenizing, so packing can only make it smaller
 */
public record SchedulePlan(
        int accumulation,
        long microBatchesPerEpoch,
        long stepsPerEpoch,
        long totalSteps,
        long warmupSteps,
        int evalEvery,
        int saveEvery,
        int logEvery,
        boolean estimated) {

    public static SchedulePlan of(Recipe recipe, int accumulation, long microBatchesPerEpoch, boolean estimated) {
        Recipe.Training training = recipe.training();
        Recipe.Output output = recipe.output();
        long total = training.maxSteps() != null && training.maxSteps() > 0 ? training.maxSteps()
                : Math.max(1, (long) Math.ceil(training.numEpochs() * microBatchesPerEpoch / accumulation));
        long perEpoch = Math.max(1, microBatchesPerEpoch / accumulation);
        long warmup;
        if (training.warmupSteps() != null) {
            warmup = training.warmupSteps();
        } else if (training.warmupRatio() != null) {
            warmup = (long) Math.ceil(training.warmupRatio() * total);
        } else {
            warmup = Math.min(100, (long) (0.03 * total)); // Axolotl's default warm-up
        }
        int eval = every(output.evalStrategy() == EvalStrategy.NO, output.evalStrategy() == EvalStrategy.EPOCH, output.evalSteps(), output.evalsPerEpoch(), total, perEpoch, 0);
        // save_strategy: best saves at evaluations (when the metric improved: the trainer decides)
        int save = output.saveStrategy() == SaveStrategy.BEST ? eval
                : every(output.saveStrategy() == SaveStrategy.NO, output.saveStrategy() == SaveStrategy.EPOCH, output.saveSteps(), output.savesPerEpoch(), total, perEpoch, perEpoch);
        int log = output.loggingSteps() == null ? 1 : output.loggingSteps();
        return new SchedulePlan(accumulation, microBatchesPerEpoch, perEpoch, total, warmup, eval, save, log, estimated);
    }

    /**
     * {@code eval_steps}/{@code save_steps} as a step interval: a fraction below 1 is a share of the total steps
     * (HF), {@code *_per_epoch} divides an epoch, strategy {@code no} switches it off, {@code epoch} means once per
     * epoch; with nothing given, {@code fallback}.
     */
    static int every(boolean no, boolean epoch, Double steps, Integer perEpochCount, long total, long stepsPerEpoch,
            long fallback) {
        if (no) {
            return 0;
        }
        if (epoch) {
            return (int) stepsPerEpoch;
        }
        if (steps != null) {
            return (int) (steps < 1 ? Math.max(1, Math.ceil(steps * total)) : Math.round(steps));
        }
        if (perEpochCount != null && perEpochCount > 0) {
            return (int) Math.max(1, stepsPerEpoch / perEpochCount);
        }
        return (int) fallback;
    }

    /** The learning rate of the update after {@code updatesDone} updates. */
    public double learningRate(Recipe.Training training, long updatesDone) {
        return training.lrScheduler().learningRate(training.learningRate(), training.cosineMinLrRatio(),
                training.cosineConstantLrRatio(), training.lrQuadraticWarmup(), updatesDone, totalSteps, warmupSteps);
    }

    /** The schedule as {@code validate} and {@code plan} print it. */
    public String describe() {
        String bound = estimated ? "at most " : "";
        StringBuilder s = new StringBuilder();
        s.append(String.format(Locale.ROOT, "steps per epoch: %s%d%s%n", bound, stepsPerEpoch,
                estimated ? " (counted in rows; packing puts several rows in one sequence)" : ""));
        s.append(String.format(Locale.ROOT, "total steps: %s%d%n", bound, totalSteps));
        s.append(String.format(Locale.ROOT, "warmup steps: %d%n", warmupSteps));
        s.append("eval every: ").append(evalEvery > 0 ? evalEvery + " steps" : "start and end only").append('\n');
        s.append("save every: ").append(saveEvery > 0 ? saveEvery + " steps" : "never (no checkpoints)").append('\n');
        s.append("log every: ").append(logEvery).append(logEvery == 1 ? " step" : " steps").append('\n');
        return s.toString();
    }
}
