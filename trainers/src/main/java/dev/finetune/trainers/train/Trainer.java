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
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.checkpoint.HfTrainerState;
import dev.finetune.trainers.train.checkpoint.ResumeKeys;
import dev.finetune.trainers.train.checkpoint.TrainerState;
import dev.finetune.trainers.train.optim.AdamW;
import dev.finetune.trainers.train.optim.GradientClipping;
import dev.finetune.trainers.train.optim.LrSchedule;
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

    private final TrainableModel<?> model;
    private final Objective<B> objective;
    private final List<B> train;
    private final List<B> eval;
    private final TrainingOptions options;
    private final NDManager manager;
    private final Listener listener;
    private long numTokens;

    /**
     * @param train the training micro batches of one epoch
     * @param eval evaluation micro batches, possibly none
     * @param manager long-lived: holds the optimizer moments; step scopes allocate through it and free at once
     */
    public Trainer(TrainableModel<?> model, Objective<B> objective, List<B> train, List<B> eval,
            TrainingOptions options, NDManager manager, Listener listener) {
        this.model = model;
        this.objective = objective;
        this.train = train;
        this.eval = eval;
        this.options = options;
        this.manager = manager;
        this.listener = listener;
    }

    /** Total optimizer steps: {@code max_steps}, else {@code ceil(num_epochs × micro batches / accumulation)}. */
    public static long totalSteps(TrainingOptions options, int microBatchesPerEpoch) {
        if (options.maxSteps() > 0) {
            return options.maxSteps();
        }
        return Math.max(1, (long) Math.ceil(options.numEpochs() * microBatchesPerEpoch
                / options.gradientAccumulationSteps()));
    }

    public Summary run() {
        Path outputDir = options.outputDir();
        CheckpointStore checkpoints = new CheckpointStore(outputDir, options.saveTotalLimit());
        checkpoints.removeLeftovers();
        int perEpoch = train.size();
        long totalSteps = totalSteps(options, perEpoch);
        long warmupSteps = LrSchedule.warmupUpdates(options.warmupSteps(), options.warmupRatio(), totalSteps);
        Map<String, String> resumeKeys = resumeKeys(options, perEpoch);
        List<NamedArray> params = model.trainable();
        AdamW optimizer = new AdamW(params, new AdamW.Hyper(options.adamBeta1(), options.adamBeta2(),
                options.adamEpsilon(), options.weightDecay()), manager);
        DataOrder order = new DataOrder(perEpoch, options.seed());

        boolean gradModeBefore = JniUtils.isGradMode();
        JniUtils.setGradMode(false);
        long started = System.nanoTime();
        long step = 0;
        MetricsLog metrics;
        Path resumeFrom = resumeFolder(options, checkpoints);
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
        for (long p = 0; p < step * options.gradientAccumulationSteps(); p++) {
            numTokens += train.get(order.at(p)).tokenCount();
        }
        LogWindow window = new LogWindow(options.loggingSteps());
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
                long position = step * options.gradientAccumulationSteps();
                double lr = options.lrScheduler().learningRate(options.learningRate(),
                        options.cosineMinLrRatio(), step, totalSteps, warmupSteps);
                Map<String, Object> line = trainStep(step, position, order, params, optimizer, lr);
                step++;
                long consumed = position + options.gradientAccumulationSteps();
                line.put("epoch", (double) consumed / perEpoch);
                lastLoss = (double) line.get("loss");
                lossSum += lastLoss;
                for (long p = position; p < consumed; p++) {
                    samples += train.get(order.at(p)).samples();
                }
                if (!eval.isEmpty() && (step == totalSteps
                        || (options.evalSteps() > 0 && step % options.evalSteps() == 0))) {
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
                boolean scheduled = options.saveSteps() > 0 && (step % options.saveSteps() == 0 || step == totalSteps);
                if (scheduled || stop != null) {
                    TrainerState state = new TrainerState(step, (double) consumed / perEpoch, consumed, perEpoch,
                            options.seed(), options.lrScheduler().key(), totalSteps, warmupSteps,
                            options.learningRate(), lr, resumeKeys, ResumeKeys.hash(resumeKeys));
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
                Map<String, Object> summary = summary(step, (double) step * options.gradientAccumulationSteps() / perEpoch,
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
        return new HfTrainerState(epoch, step, totalSteps, options.loggingSteps(), options.evalSteps(),
                options.saveSteps(), (int) train.get(0).samples(), options.numEpochs(), numTokens,
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
        int accumulation = options.gradientAccumulationSteps();
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
            long microSeed = Seeds.microStep(options.seed(), step, micro);
            Engine.getInstance().setRandomSeed(Seeds.derive(microSeed, -1));
            try (NDScope scope = new NDScope()) {
                ForwardPass forward = ForwardPass.of(model, microSeed, options.gradientCheckpointing());
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
        if (options.stopOnNonFinite() && !(Double.isFinite(loss) && Double.isFinite(gradNorm))) {
            throw new NonFinite(step + 1, loss, gradNorm);
        }
        optimizer.step(step + 1, lr, GradientClipping.scale(gradNorm, options.maxGradNorm()));
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
                Objective.Loss result = objective.loss(batch, ForwardPass.of(model, options.seed(), false), manager);
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
    public static void requireResumable(TrainingOptions options, int microBatchesPerEpoch) {
        Path folder = resumeFolder(options, new CheckpointStore(options.outputDir(), options.saveTotalLimit()));
        if (folder != null) {
            requireMatches(CheckpointStore.verify(folder), options, microBatchesPerEpoch, folder);
        }
    }

    /**
     * Refuses a checkpoint the recipe and data cannot continue exactly: other resume keys, another seed, another
     * accumulation, or a step beyond the recipe's last. Every checkpoint of the folder would fail alike, so this
     * is the user's choice to make (exit 2), not a reason to fall back to an older one.
     */
    private static void requireMatches(TrainerState state, TrainingOptions options, int microBatchesPerEpoch,
            Path folder) {
        ResumeKeys.requireUnchanged(state, resumeKeys(options, microBatchesPerEpoch), folder.toString());
        String where = folder.resolve(CheckpointStore.STATE).toString();
        if (state.seed() != options.seed()) {
            throw new UserError(where, "the checkpoint continues seed " + state.seed() + "'s data order and dropout, "
                    + "not seed " + options.seed() + "'s", "resume with seed: " + state.seed()
                    + ", or start a fresh run in another output_dir");
        }
        if (state.microBatchesConsumed() != state.globalStep() * options.gradientAccumulationSteps()) {
            throw new UserError(where, "the checkpoint took " + state.microBatchesConsumed() + " micro batches in "
                    + state.globalStep() + " steps, which gradient_accumulation_steps "
                    + options.gradientAccumulationSteps() + " cannot continue",
                    "resume with the batch settings the checkpoint was written with");
        }
        long total = totalSteps(options, microBatchesPerEpoch);
        if (state.globalStep() > total) {
            throw new UserError(where, "the checkpoint is at step " + state.globalStep() + ", beyond this recipe's "
                    + total + " steps", "raise max_steps or num_epochs, or resume from an earlier checkpoint");
        }
    }

    /** The recipe values a checkpoint of this run is valid for: its hash names the owner of output_dir too. */
    public static Map<String, String> resumeKeys(TrainingOptions options, int microBatchesPerEpoch) {
        Map<String, String> keys = new TreeMap<>(options.resumeInvariants());
        keys.put("micro_batches_per_epoch", Integer.toString(microBatchesPerEpoch));
        return keys;
    }

    private static Path resumeFolder(TrainingOptions options, CheckpointStore checkpoints) {
        TrainingOptions.Resume resume = options.resumeFromCheckpoint();
        if (resume instanceof TrainingOptions.Resume.From from) {
            return checkpoints.resolve("resume_from_checkpoint", from.folder());
        }
        if (resume instanceof TrainingOptions.Resume.Newest) {
            List<CheckpointStore.Saved> complete = checkpoints.complete();
            if (complete.isEmpty()) {
                LOG.info("resume_from_checkpoint: no checkpoint in {} yet, starting from step 0", options.outputDir());
                return null;
            }
            return newestIntact(complete, options.outputDir());
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
        requireMatches(state, options, train.size(), folder);
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
