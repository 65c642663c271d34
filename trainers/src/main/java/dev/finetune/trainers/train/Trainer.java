package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.BestModel;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.Resume;
import dev.finetune.recipes.ResumeInvariants;
import dev.finetune.recipes.SaveStrategy;
import dev.finetune.recipes.SchedulePlan;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.checkpoint.HfTrainerState;
import dev.finetune.trainers.train.checkpoint.ResumeKeys;
import dev.finetune.trainers.train.checkpoint.TrainerState;
import dev.finetune.trainers.train.optim.AdamW;
import dev.finetune.trainers.train.optim.UpdateRule;
import dev.finetune.trainers.train.output.LogWindow;
import dev.finetune.trainers.train.output.TrainResults;
import dev.finetune.trainers.train.output.LossCurve;
import dev.finetune.trainers.train.output.MetricsLog;
import dev.finetune.trainers.train.output.Progress;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * The single-device training loop: which step runs when, evaluation, metrics, checkpoints and exact resume, for
 * any {@link Objective} on any {@link TrainableModel}. What one step computes is {@link Steps}; which checkpoint a
 * run continues from, and whether it may, is {@link ResumePoint}.
 *
 * <p>One optimizer step consumes {@code gradient_accumulation_steps} micro batches from the data stream; each micro
 * batch runs in its own {@code NDScope}, so nothing but weights and optimizer moments outlives it. Everything random
 * is reseeded from ({@code seed}, step, micro batch), and the data order from ({@code seed}, epoch): a resumed run
 * repeats the uninterrupted one bit for bit on the same hardware and thread count.
 *
 * <p>Runs on the calling thread and sets that thread's grad mode itself (libtorch's grad mode is thread-local and
 * a fresh thread starts with it on).
 */
public final class Trainer<B extends Batch> {
    private static final Logger LOG = LogManager.getLogger(Trainer.class);

    /** Observes the run; both methods run on the training thread. */
    public interface Listener {
        /**
         * After the first optimizer step this process runs: entries to add to that step's line in
         * {@code metrics.jsonl}, such as the plan's peak next to the measured one.
         */
        default Map<String, Object> firstStep(Map<String, Object> line) {
            return Map.of();
        }

        /** After every optimizer step (and step 0's evaluation), with the line written to {@code metrics.jsonl}. */
        default void afterStep(long step, Map<String, Object> metrics) {}

        /** A checkpoint's files are written and flushed; it becomes visible when this returns. */
        default void beforeCheckpointPublished(Path temporaryFolder) {}

        /**
         * Writes what makes a checkpoint folder one the HF stack loads (adapter or model config, tokenizer); runs
         * before the checksums, so they cover it.
         */
        default void checkpointFiles(Path folder) throws java.io.IOException {}
    }

    /**
     * A step whose loss or gradient norm is NaN or infinite, stopped before its update: the weights and every
     * checkpoint stay as they were, so the run can continue from its last checkpoint once the cause is fixed.
     */
    public static final class NonFinite extends UserError {
        private final long step;
        private final double loss;
        private final double gradNorm;

        NonFinite(long step, double loss, double gradNorm) {
            this(step, loss, gradNorm, "training stopped before this update",
                    "lower learning_rate or set max_grad_norm, check the data (stop_on_nonfinite: false trains on "
                            + "regardless)");
        }

        private NonFinite(long step, double loss, double gradNorm, String outcome, String hint) {
            super("step " + step, "the loss is " + loss + " and the gradient norm " + gradNorm + ": " + outcome, hint);
            this.step = step;
            this.loss = loss;
            this.gradNorm = gradNorm;
        }

        /**
         * The same stop, saying which checkpoint holds a good state. The weights this step started from produced it,
         * so the checkpoint of the step before ({@code poisoned}, set aside, or null when there was none) would only
         * repeat it; {@code good} is the newest checkpoint before that, or null.
         */
        NonFinite withCheckpoints(Path poisoned, Path good) {
            String outcome = "training stopped before this update"
                    + (poisoned == null ? "" : "; " + poisoned.getFileName() + " holds the weights that produced it and "
                            + "was set aside, never to be resumed")
                    + (good == null ? "; no checkpoint from before the divergence exists"
                            : "; " + good.getFileName() + " holds the last good state");
            String hint = "lower learning_rate or set max_grad_norm, check the data, then "
                    + (good == null ? "start over with overwrite_output_dir=true" : "continue with "
                            + "resume_from_checkpoint=true") + " (stop_on_nonfinite: false trains on regardless)";
            return new NonFinite(step, loss, gradNorm, outcome, hint);
        }
    }

    /** What a finished run reports: the step reached and the evaluation losses before and after. */
    public record Summary(long steps, double lastLoss, double firstEvalLoss, double lastEvalLoss) {}

    /**
     * What the loop needs of the recipe, as {@code recipes} resolved it.
     *
     * @param schedule computed for the training batches this loop gets
     * @param resumeInvariants the recipe values a checkpoint is only valid for ({@link ResumeInvariants}): a resume
     *     with any of them changed is refused
     * @param tensorBoard {@code use_tensorboard}: the logged lines also go to a TensorBoard event file
     * @param shuffled false under {@code curriculum_sampling}: every epoch visits the micro batches in order
     * @param best the evaluation metric that decides best checkpoints and early stopping, or {@code null}
     * @param saveBest {@code save_strategy: best}: a checkpoint only at evaluations that improve {@code best}
     */
    public record Run(Recipe.Training training, SchedulePlan schedule, Path outputDir, int saveTotalLimit,
            Resume resume, Map<String, String> resumeInvariants, boolean tensorBoard, boolean shuffled, BestModel best,
            boolean saveBest) {

        public Run(Recipe.Training training, SchedulePlan schedule, Path outputDir, int saveTotalLimit, Resume resume,
                Map<String, String> resumeInvariants, boolean tensorBoard) {
            this(training, schedule, outputDir, saveTotalLimit, resume, resumeInvariants, tensorBoard, true, null, false);
        }

        /** The run a recipe describes, over training data and a base model with the given fingerprints. */
        public static Run of(Recipe recipe, SchedulePlan schedule, String datasetIdentity, String baseModelIdentity) {
            return new Run(recipe.training(), schedule, Path.of(recipe.output().outputDir()),
                    recipe.output().saveTotalLimit(), recipe.output().resume(),
                    ResumeInvariants.of(recipe, datasetIdentity, baseModelIdentity), recipe.output().useTensorboard(),
                    !recipe.data().selection().curriculum(), recipe.output().best(),
                    recipe.output().saveStrategy() == SaveStrategy.BEST);
        }

        /** Which micro batch comes at each data position of this run. */
        public DataOrder order(int microBatchesPerEpoch) {
            return new DataOrder(microBatchesPerEpoch, training.seed(), shuffled);
        }
    }

    private final TrainableModel<?> model;
    private final List<B> train;
    private final List<B> eval;
    private final Recipe.Training training;
    private final SchedulePlan schedule;
    private final Run run;
    private final NDManager manager;
    private final Listener listener;
    private final Steps<B> steps;
    private long numTokens;

    /**
     * @param train the training micro batches of one epoch
     * @param eval evaluation micro batches, possibly none
     * @param manager long-lived: holds the optimizer moments; step scopes allocate through it and free at once
     */
    public Trainer(TrainableModel<?> model, Objective<B> objective, List<B> train, List<B> eval,
            Run run, NDManager manager, Listener listener) {
        if (run.schedule().microBatchesPerEpoch() != train.size()) {
            throw new IllegalArgumentException("the schedule was planned for " + run.schedule().microBatchesPerEpoch()
                    + " micro batches per epoch, but the loop gets " + train.size());
        }
        this.model = model;
        this.train = train;
        this.eval = eval;
        this.run = run;
        this.training = run.training();
        this.schedule = run.schedule();
        this.manager = manager;
        this.listener = listener;
        this.steps = new Steps<>(model, objective, train, eval, training, schedule.accumulation(), manager);
    }

    public Summary run() {
        Path outputDir = run.outputDir();
        CheckpointStore checkpoints = new CheckpointStore(outputDir, run.saveTotalLimit());
        checkpoints.removeLeftovers();
        int perEpoch = train.size();
        long totalSteps = schedule.totalSteps();
        long warmupSteps = schedule.warmupSteps();
        int accumulation = schedule.accumulation();
        Map<String, String> resumeKeys = ResumePoint.keys(run, perEpoch);
        List<NamedArray> params = model.trainable();
        UpdateRule optimizer = UpdateRule.of(training.optimizer(), params, new AdamW.Hyper(training.adamBeta1(),
                training.adamBeta2(), training.adamEpsilon(), training.weightDecay()), manager);
        DataOrder order = run.order(perEpoch);

        boolean gradModeBefore = JniUtils.isGradMode();
        JniUtils.setGradMode(false);
        long started = System.nanoTime();
        long step = 0;
        MetricsLog metrics;
        Path resumeFrom = ResumePoint.folder(run, checkpoints);
        if (resumeFrom != null) {
            TrainerState state = ResumePoint.restore(resumeFrom, run, perEpoch, params, optimizer, manager);
            step = state.globalStep();
            metrics = MetricsLog.resume(outputDir, step, run.tensorBoard());
            LOG.info("resumed from {} at step {}, epoch {}", resumeFrom, step, state.epoch());
            StopRequest.checkpoint(resumeFrom.toString());
        } else {
            metrics = MetricsLog.start(outputDir, run.tensorBoard());
        }
        double firstEval = Double.NaN;
        double lastEval = Double.NaN;
        double lastLoss = Double.NaN;
        long firstStep = step;
        double lossSum = 0;
        long samples = 0;
        // TRL's num_tokens: every real token trained on so far, the resumed run's included
        numTokens = 0;
        for (long p = 0; p < step * accumulation; p++) {
            numTokens += train.get(order.at(p)).tokenCount();
        }
        LogWindow window = new LogWindow(schedule.logEvery());
        BestCheckpoint best = run.best() == null ? null : BestCheckpoint.replay(run.best(), metrics.file(), step, checkpoints);
        boolean stoppedEarly = false;
        // Axolotl's loss watchdog: the last logged loss, checked after every step
        int watchdogViolations = 0;
        Double lastLoggedLoss = null;
        StopRequest.training(true);
        try (metrics; Progress progress = Progress.forRun(step, totalSteps)) {
            if (step == 0 && !eval.isEmpty()) {
                Map<String, Object> line = new LinkedHashMap<>();
                line.put("step", 0L);
                line.put("epoch", 0.0);
                firstEval = steps.evaluate(line);
                lastEval = firstEval;
                metrics.write(line);
                listener.afterStep(0, line);
            }
            while (step < totalSteps) {
                long position = step * accumulation;
                double lr = schedule.learningRate(training, step);
                Map<String, Object> line;
                try {
                    line = steps.train(step, position, order, params, optimizer, lr, numTokens);
                } catch (NonFinite e) {
                    Path poisoned = checkpoints.setAside(step);
                    List<CheckpointStore.Saved> left = checkpoints.complete();
                    throw e.withCheckpoints(poisoned, left.isEmpty() ? null : left.get(left.size() - 1).folder());
                }
                numTokens = (long) line.get("num_tokens");
                step++;
                long consumed = position + accumulation;
                line.put("epoch", (double) consumed / perEpoch);
                lastLoss = (double) line.get("loss");
                lossSum += lastLoss;
                for (long p = position; p < consumed; p++) {
                    samples += train.get(order.at(p)).samples();
                }
                boolean evaluated = !eval.isEmpty() && (step == totalSteps
                        || (schedule.evalEvery() > 0 && step % schedule.evalEvery() == 0));
                boolean improved = false;
                if (evaluated) {
                    lastEval = steps.evaluate(line);
                    if (best != null) {
                        improved = best.observe(step, line);
                        stoppedEarly = best.patienceSpent();
                    }
                }
                if (step == firstStep + 1) {
                    line.putAll(listener.firstStep(line));
                }
                Map<String, Object> logged = window.add(step, totalSteps, line);
                if (logged != null) {
                    metrics.write(logged);
                    if (logged.get("loss") instanceof Number loss) {
                        lastLoggedLoss = loss.doubleValue();
                    }
                }
                boolean watchdogStop = false;
                if (training.lossWatchdogThreshold() != null && lastLoggedLoss != null) {
                    watchdogViolations = lastLoggedLoss > training.lossWatchdogThreshold() ? watchdogViolations + 1 : 0;
                    if (watchdogViolations >= training.lossWatchdogPatience()) {
                        LOG.warn("warning: the loss {} stayed above loss_watchdog_threshold {} for {} steps: training "
                                + "stops at step {}", lastLoggedLoss, training.lossWatchdogThreshold(), watchdogViolations, step);
                        watchdogStop = true;
                        stoppedEarly = true;
                    }
                }
                progress.step(step, logged);
                listener.afterStep(step, line);
                String stop = StopRequest.requested();
                boolean scheduled = run.saveBest() ? improved
                        : schedule.saveEvery() > 0 && (step % schedule.saveEvery() == 0 || step == totalSteps || stoppedEarly);
                if (scheduled || stop != null) {
                    TrainerState state = new TrainerState(step, (double) consumed / perEpoch, consumed, perEpoch,
                            training.seed(), training.lrScheduler().key(), totalSteps, warmupSteps,
                            training.learningRate(), lr, resumeKeys, ResumeKeys.hash(resumeKeys));
                    Path saved = checkpoints.save(params, named(optimizer.state()), state,
                            hfState(step, (double) consumed / perEpoch, totalSteps, metrics.file()).toJson(),
                            listener::checkpointFiles, listener::beforeCheckpointPublished);
                    LOG.debug("saved {}", saved);
                    if (best != null) {
                        best.saved(step, saved);
                    }
                    StopRequest.checkpoint(saved.toString());
                    LossCurve.draw(metrics.file(), outputDir);
                    if (stop != null) {
                        throw new StopRequest.Stopped(stop, step, "saved " + saved);
                    }
                }
                if (stoppedEarly) {
                    if (!watchdogStop) {
                        LOG.info("early stopping at step {}: {} has not improved on {} (step {}) for {} evaluations",
                                step, run.best().lineKey(), best.value(), best.step(), run.best().patience());
                    }
                    break;
                }
            }
            if (best != null && run.best().loadAtEnd()) {
                best.loadInto(params, step, manager);
            }
            if (step > firstStep) {
                Map<String, Object> summary = TrainResults.summary(step, (double) step * accumulation / perEpoch,
                        (System.nanoTime() - started) / 1e9, step - firstStep, samples, lossSum, numTokens,
                        model.parameterCount());
                TrainResults.write(outputDir, summary);
                metrics.summary(step, summary);
                LOG.info("run summary: {}", summary);
            }
            LossCurve.draw(metrics.file(), outputDir);
        } finally {
            StopRequest.training(false);
            JniUtils.setGradMode(gradModeBefore);
        }
        return new Summary(step, lastLoss, firstEval, lastEval);
    }

    /** The HF Trainer's view of this run at {@code step}, for {@code trainer_state.json}. */
    private HfTrainerState hfState(long step, double epoch, long totalSteps, Path metricsFile) {
        List<com.google.gson.JsonObject> history = new ArrayList<>();
        for (com.google.gson.JsonObject line : MetricsLog.read(metricsFile)) {
            if (line.has("step") && line.get("step").getAsLong() <= step) {
                history.add(line);
            }
        }
        return new HfTrainerState(epoch, step, totalSteps, schedule.logEvery(), schedule.evalEvery(),
                schedule.saveEvery(), (int) train.get(0).samples(), training.numEpochs(), numTokens,
                TrainResults.totalFlos(numTokens, model.parameterCount()), history);
    }

    private static List<NamedArray> named(Map<String, NDArray> arrays) {
        List<NamedArray> list = new ArrayList<>(arrays.size());
        arrays.forEach((name, array) -> list.add(new NamedArray(name, array)));
        return list;
    }
}
