package dev.finetune.trainers.train;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.Resume;
import dev.finetune.recipes.ResumeInvariants;
import dev.finetune.recipes.SchedulePlan;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.checkpoint.HfTrainerState;
import dev.finetune.trainers.train.checkpoint.ResumeKeys;
import dev.finetune.trainers.train.checkpoint.TrainerState;
import dev.finetune.trainers.train.optim.AdamW;
import dev.finetune.trainers.train.optim.GradientClipping;
import dev.finetune.trainers.train.output.LogWindow;
import dev.finetune.trainers.train.output.TrainResults;
import dev.finetune.trainers.train.output.LossCurve;
import dev.finetune.trainers.train.output.MetricsLog;
import dev.finetune.trainers.train.output.NativeHeap;
import dev.finetune.trainers.train.output.PeakMemory;
import dev.finetune.trainers.train.output.Progress;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * The single-device training loop: gradient accumulation, clipping, schedule, evaluation, metrics, checkpoints
 * and exact resume, for any {@link Objective} on any {@link TrainableModel}.
 *
 * <p>One optimizer step consumes {@code gradient_accumulation_steps} micro batches from the data stream; each micro
 * batch runs in its own {@link NDScope}, so nothing but weights and optimizer moments outlives it. Everything random
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
        NonFinite(long step, double loss, double gradNorm) {
            super("step " + step, "the loss is " + loss + " and the gradient norm " + gradNorm
                    + ": training stopped before this update, and the last checkpoint holds the last good state",
                    "lower learning_rate or set max_grad_norm, check the data, then continue with "
                            + "resume_from_checkpoint=true (stop_on_nonfinite: false trains on regardless)");
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
     */
    public record Run(Recipe.Training training, SchedulePlan schedule, Path outputDir, int saveTotalLimit,
            Resume resume, Map<String, String> resumeInvariants) {

        /** The run a recipe describes, over training data with the given fingerprint. */
        public static Run of(Recipe recipe, SchedulePlan schedule, String datasetIdentity) {
            return new Run(recipe.training(), schedule, Path.of(recipe.output().outputDir()),
                    recipe.output().saveTotalLimit(), recipe.output().resume(),
                    ResumeInvariants.of(recipe, datasetIdentity));
        }
    }

    private final TrainableModel<?> model;
    private final Objective<B> objective;
    private final List<B> train;
    private final List<B> eval;
    private final Recipe.Training training;
    private final SchedulePlan schedule;
    private final Run run;
    private final NDManager manager;
    private final Listener listener;
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
        this.objective = objective;
        this.train = train;
        this.eval = eval;
        this.run = run;
        this.training = run.training();
        this.schedule = run.schedule();
        this.manager = manager;
        this.listener = listener;
    }

    public Summary run() {
        Path outputDir = run.outputDir();
        CheckpointStore checkpoints = new CheckpointStore(outputDir, run.saveTotalLimit());
        checkpoints.removeLeftovers();
        int perEpoch = train.size();
        long totalSteps = schedule.totalSteps();
        long warmupSteps = schedule.warmupSteps();
        int accumulation = schedule.accumulation();
        Map<String, String> resumeKeys = resumeKeys(run, perEpoch);
        List<NamedArray> params = model.trainable();
        AdamW optimizer = new AdamW(params, new AdamW.Hyper(training.adamBeta1(), training.adamBeta2(),
                training.adamEpsilon(), training.weightDecay()), manager);
        DataOrder order = new DataOrder(perEpoch, training.seed());

        boolean gradModeBefore = JniUtils.isGradMode();
        JniUtils.setGradMode(false);
        long started = System.nanoTime();
        long step = 0;
        MetricsLog metrics;
        Path resumeFrom = resumeFolder(run, checkpoints);
        if (resumeFrom != null) {
            TrainerState state = restore(resumeFrom, params, optimizer);
            step = state.globalStep();
            metrics = MetricsLog.resume(outputDir, step);
            LOG.info("resumed from {} at step {}, epoch {}", resumeFrom, step, state.epoch());
        } else {
            metrics = MetricsLog.start(outputDir);
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
        StopRequest.training(true);
        try (metrics; Progress progress = Progress.forRun(step, totalSteps)) {
            if (step == 0 && !eval.isEmpty()) {
                Map<String, Object> line = new LinkedHashMap<>();
                line.put("step", 0L);
                line.put("epoch", 0.0);
                firstEval = evaluate(line);
                lastEval = firstEval;
                metrics.write(line);
                listener.afterStep(0, line);
            }
            while (step < totalSteps) {
                long position = step * accumulation;
                double lr = schedule.learningRate(training, step);
                Map<String, Object> line = trainStep(step, position, order, params, optimizer, lr);
                step++;
                long consumed = position + accumulation;
                line.put("epoch", (double) consumed / perEpoch);
                lastLoss = (double) line.get("loss");
                lossSum += lastLoss;
                for (long p = position; p < consumed; p++) {
                    samples += train.get(order.at(p)).samples();
                }
                if (!eval.isEmpty() && (step == totalSteps
                        || (schedule.evalEvery() > 0 && step % schedule.evalEvery() == 0))) {
                    lastEval = evaluate(line);
                }
                if (step == firstStep + 1) {
                    line.putAll(listener.firstStep(line));
                }
                Map<String, Object> logged = window.add(step, totalSteps, line);
                if (logged != null) {
                    metrics.write(logged);
                }
                progress.step(step, lastLoss, (double) line.get("tokens_per_second"));
                listener.afterStep(step, line);
                String stop = StopRequest.requested();
                boolean scheduled = schedule.saveEvery() > 0 && (step % schedule.saveEvery() == 0 || step == totalSteps);
                if (scheduled || stop != null) {
                    TrainerState state = new TrainerState(step, (double) consumed / perEpoch, consumed, perEpoch,
                            training.seed(), training.lrScheduler().key(), totalSteps, warmupSteps,
                            training.learningRate(), lr, resumeKeys, ResumeKeys.hash(resumeKeys));
                    Path saved = checkpoints.save(params, named(optimizer.state()), state,
                            hfState(step, (double) consumed / perEpoch, totalSteps, metrics.file()).toJson(),
                            listener::checkpointFiles, listener::beforeCheckpointPublished);
                    LOG.debug("saved {}", saved);
                    LossCurve.draw(metrics.file(), outputDir);
                    if (stop != null) {
                        throw new StopRequest.Stopped(stop, step, "saved " + saved);
                    }
                }
            }
            if (step > firstStep) {
                Map<String, Object> summary = summary(step, (double) step * accumulation / perEpoch,
                        (System.nanoTime() - started) / 1e9, step - firstStep, samples, lossSum);
                TrainResults.write(outputDir, summary);
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
                6.0 * numTokens * model.parameterCount(), history);
    }

    /**
     * The Hugging Face Trainer's closing log entry, for this run (a resumed run counts its own steps and time):
     * {@code total_flos} is its {@code 6 × tokens × parameters} (embeddings excepted) over all tokens so far.
     */
    private Map<String, Object> summary(long step, double epoch, double seconds, long steps, long samples,
            double lossSum) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("step", step);
        line.put("epoch", epoch);
        line.put("train_runtime", seconds);
        line.put("train_samples_per_second", samples / seconds);
        line.put("train_steps_per_second", steps / seconds);
        line.put("train_loss", lossSum / steps);
        line.put("total_flos", 6.0 * numTokens * model.parameterCount());
        line.put("num_tokens", numTokens);
        return line;
    }

    /** One optimizer step over the accumulation window that starts at data position {@code position}. */
    private Map<String, Object> trainStep(long step, long position, DataOrder order, List<NamedArray> params,
            AdamW optimizer, double lr) {
        long started = System.nanoTime();
        int accumulation = schedule.accumulation();
        List<B> window = new ArrayList<>(accumulation);
        long windowWeight = 0;
        long tokens = 0;
        for (int micro = 0; micro < accumulation; micro++) {
            B batch = train.get(order.at(position + micro));
            window.add(batch);
            windowWeight += batch.lossWeight();
            tokens += batch.tokenCount();
        }
        // Every micro batch's summed loss is divided by the whole window's weight, so the window's loss and
        // gradient are those of one big batch, whatever the padding in each micro batch.
        float inverseWeight = (float) (1.0 / Math.max(1, windowWeight));
        model.setTraining(true);
        double loss = 0;
        double units = 0;
        Map<String, Double> metricSums = new TreeMap<>();
        for (int micro = 0; micro < accumulation; micro++) {
            B batch = window.get(micro);
            long microSeed = Seeds.microStep(training.seed(), step, micro);
            Engine.getInstance().setRandomSeed(Seeds.derive(microSeed, -1));
            try (NDScope scope = new NDScope()) {
                ForwardPass forward = ForwardPass.of(model, microSeed, training.gradientCheckpointing());
                try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                    Objective.Loss result = objective.loss(batch, forward, manager);
                    NDArray scaled = result.sum().mul(manager.full(new Shape(), inverseWeight, DataType.FLOAT32));
                    forward.backward(scaled, collector);
                    loss += scaled.getFloat();
                    units += result.units() != null ? result.units() : batch.lossWeight();
                    addWeighted(metricSums, result.metrics(), (double) batch.lossWeight() / Math.max(1, windowWeight));
                }
            }
        }
        if (units != windowWeight) {
            // an objective that learns its units while running (GRPO's dapo: the window's completion tokens) was
            // scaled by the planned weight; gradients are linear in the loss, so one rescale makes it exact
            double correction = windowWeight / Math.max(1, units);
            try (NDScope scope = new NDScope()) {
                NDArray factor = manager.full(new Shape(), (float) correction, DataType.FLOAT32);
                for (NamedArray param : params) {
                    param.array().getGradient().muli(factor);
                }
            }
            loss *= correction;
        }
        double gradNorm;
        try (NDScope scope = new NDScope()) {
            gradNorm = GradientClipping.globalNorm(params);
        }
        if (training.stopOnNonFinite() && !(Double.isFinite(loss) && Double.isFinite(gradNorm))) {
            throw new NonFinite(step + 1, loss, gradNorm);
        }
        optimizer.step(step + 1, lr, GradientClipping.scale(gradNorm, training.maxGradNorm()));
        NativeHeap.trim();
        double seconds = (System.nanoTime() - started) / 1e9;

        Map<String, Object> line = new LinkedHashMap<>();
        line.put("step", step + 1);
        line.put("epoch", 0.0);
        line.put("loss", loss);
        line.put("learning_rate", lr);
        line.put("grad_norm", gradNorm);
        line.put("tokens_per_second", tokens / seconds);
        numTokens += tokens;
        line.put("num_tokens", numTokens);
        line.put("peak_memory_mb", PeakMemory.megabytes());
        line.putAll(metricSums);
        return line;
    }

    /** Loss over all evaluation batches, weighted by loss units; adds {@code eval_loss} and {@code eval_*} to line. */
    private double evaluate(Map<String, Object> line) {
        model.setTraining(false);
        long totalWeight = Math.max(1, eval.stream().mapToLong(Batch::lossWeight).sum());
        double lossSum = 0;
        double units = 0;
        Map<String, Double> metricSums = new TreeMap<>();
        for (B batch : eval) {
            try (NDScope scope = new NDScope()) {
                Objective.Loss result = objective.loss(batch, ForwardPass.of(model, training.seed(), false), manager);
                lossSum += result.sum().getFloat();
                units += result.units() != null ? result.units() : batch.lossWeight();
                addWeighted(metricSums, result.metrics(), (double) batch.lossWeight() / totalWeight);
            }
        }
        double evalLoss = lossSum / Math.max(1, units);
        line.put("eval_loss", evalLoss);
        metricSums.forEach((name, value) -> line.put("eval_" + name, value));
        return evalLoss;
    }

    private static void addWeighted(Map<String, Double> sums, Map<String, Double> metrics, double weight) {
        metrics.forEach((name, value) -> sums.merge(name, value * weight, Double::sum));
    }

    /**
     * Refuses a resume that {@link #run} would refuse, without loading anything: lets a caller check before it
     * writes into {@code output_dir}.
     */
    public static void requireResumable(Run run, int microBatchesPerEpoch) {
        Path folder = resumeFolder(run, new CheckpointStore(run.outputDir(), run.saveTotalLimit()));
        if (folder != null) {
            requireMatches(CheckpointStore.verify(folder), run, microBatchesPerEpoch, folder);
        }
    }

    /**
     * Refuses a checkpoint the recipe and data cannot continue exactly: other resume keys, another seed, another
     * accumulation, or a step beyond the recipe's last. Every checkpoint of the folder would fail alike, so this
     * is the user's choice to make (exit 2), not a reason to fall back to an older one.
     */
    private static void requireMatches(TrainerState state, Run run, int microBatchesPerEpoch, Path folder) {
        ResumeKeys.requireUnchanged(state, resumeKeys(run, microBatchesPerEpoch), folder.toString());
        long seed = run.training().seed();
        int accumulation = run.schedule().accumulation();
        String where = folder.resolve(CheckpointStore.STATE).toString();
        if (state.seed() != seed) {
            throw new UserError(where, "the checkpoint continues seed " + state.seed() + "'s data order and dropout, "
                    + "not seed " + seed + "'s", "resume with seed: " + state.seed()
                    + ", or start a fresh run in another output_dir");
        }
        if (state.microBatchesConsumed() != state.globalStep() * accumulation) {
            throw new UserError(where, "the checkpoint took " + state.microBatchesConsumed() + " micro batches in "
                    + state.globalStep() + " steps, which gradient_accumulation_steps "
                    + accumulation + " cannot continue",
                    "resume with the batch settings the checkpoint was written with");
        }
        long total = run.schedule().totalSteps();
        if (state.globalStep() > total) {
            throw new UserError(where, "the checkpoint is at step " + state.globalStep() + ", beyond this recipe's "
                    + total + " steps", "raise max_steps or num_epochs, or resume from an earlier checkpoint");
        }
    }

    /** The recipe values a checkpoint of this run is valid for: its hash names the owner of output_dir too. */
    public static Map<String, String> resumeKeys(Run run, int microBatchesPerEpoch) {
        Map<String, String> keys = new TreeMap<>(run.resumeInvariants());
        keys.put("micro_batches_per_epoch", Integer.toString(microBatchesPerEpoch));
        return keys;
    }

    private static Path resumeFolder(Run run, CheckpointStore checkpoints) {
        Resume resume = run.resume();
        if (resume instanceof Resume.From from) {
            return checkpoints.resolve("resume_from_checkpoint", from.folder());
        }
        if (resume instanceof Resume.Newest) {
            List<CheckpointStore.Saved> complete = checkpoints.complete();
            if (complete.isEmpty()) {
                LOG.info("resume_from_checkpoint: no checkpoint in {} yet, starting from step 0", run.outputDir());
                return null;
            }
            return newestIntact(complete, run.outputDir());
        }
        return null;
    }

    /**
     * The newest checkpoint whose files match their checksums, saying which newer ones were passed over and why:
     * a disk error or a stray write must cost the steps since the previous checkpoint, never the run.
     */
    private static Path newestIntact(List<CheckpointStore.Saved> complete, Path outputDir) {
        List<String> damaged = new ArrayList<>();
        for (int i = complete.size() - 1; i >= 0; i--) {
            Path folder = complete.get(i).folder();
            try {
                CheckpointStore.verify(folder);
                if (!damaged.isEmpty()) {
                    LOG.warn("warning: resuming from {} instead: {}", folder.getFileName(), String.join("; ", damaged));
                }
                return folder;
            } catch (CheckpointStore.Damaged e) {
                damaged.add(folder.getFileName() + " is damaged (" + e.getMessage().replaceFirst("^damaged checkpoint: ", "")
                        + ")");
            }
        }
        throw new UserError(outputDir.toString(), "no intact checkpoint to resume from: " + String.join("; ", damaged),
                "start over with overwrite_output_dir=true, or restore the checkpoints from a copy");
    }

    /** Loads weights and moments in place and returns the saved state; refuses a changed recipe first. */
    private TrainerState restore(Path folder, List<NamedArray> params, AdamW optimizer) {
        TrainerState state = CheckpointStore.verify(folder);
        requireMatches(state, run, train.size(), folder);
        try (NDManager loading = manager.newSubManager()) {
            CheckpointStore.Loaded loaded = CheckpointStore.loadVerified(folder, state, loading);
            for (NamedArray param : params) {
                NDArray saved = loaded.weights().get(param.name());
                if (saved == null || !saved.getShape().equals(param.array().getShape())) {
                    throw new UserError("resume_from_checkpoint", folder + " has no weight " + param.name()
                            + " of shape " + param.array().getShape(), "resume from a checkpoint of this model");
                }
                param.array().set(saved.toByteBuffer());
            }
            optimizer.load(loaded.optimizer());
            return loaded.state();
        }
    }

    private static List<NamedArray> named(Map<String, NDArray> arrays) {
        List<NamedArray> list = new ArrayList<>(arrays.size());
        arrays.forEach((name, array) -> list.add(new NamedArray(name, array)));
        return list;
    }
}
