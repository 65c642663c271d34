package dev.finetune.trainers.train;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.Recipe;
import dev.finetune.trainers.train.optim.UpdateRule;
import dev.finetune.trainers.train.optim.GradientClipping;
import dev.finetune.trainers.train.output.NativeHeap;
import dev.finetune.trainers.train.output.PeakMemory;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * What one optimizer step does to the weights, and what one evaluation measures: the objective's summed losses over
 * an accumulation window, normalised by the whole window's weight, then clipping and the update. The {@link Trainer}
 * decides which steps run and when; this class knows nothing of schedules, checkpoints or resume.
 */
final class Steps<B extends Batch> {
    private final TrainableModel<?> model;
    private final Objective<B> objective;
    private final List<B> train;
    private final List<B> eval;
    private final Recipe.Training training;
    private final int accumulation;
    private final NDManager manager;
    private final NativeHeap heap = new NativeHeap();

    Steps(TrainableModel<?> model, Objective<B> objective, List<B> train, List<B> eval, Recipe.Training training,
            int accumulation, NDManager manager) {
        this.model = model;
        this.objective = objective;
        this.train = train;
        this.eval = eval;
        this.training = training;
        this.accumulation = accumulation;
        this.manager = manager;
    }

    /**
     * One optimizer step over the accumulation window that starts at data position {@code position}.
     *
     * @param tokensBefore every real token trained on before this step: the line's {@code num_tokens} counts on
     *     from it
     */
    Map<String, Object> train(long step, long position, DataOrder order, List<NamedArray> params, UpdateRule optimizer,
            double lr, long tokensBefore) {
        long started = System.nanoTime();
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
            throw new Trainer.NonFinite(step + 1, loss, gradNorm);
        }
        optimizer.step(step + 1, lr, GradientClipping.scale(gradNorm, training.maxGradNorm()));
        heap.afterStep();
        double seconds = (System.nanoTime() - started) / 1e9;

        Map<String, Object> line = new LinkedHashMap<>();
        line.put("step", step + 1);
        line.put("epoch", 0.0);
        line.put("loss", loss);
        line.put("learning_rate", lr);
        line.put("grad_norm", gradNorm);
        line.put("tokens_per_second", tokens / seconds);
        line.put("num_tokens", tokensBefore + tokens);
        line.put("peak_memory_mb", PeakMemory.megabytes());
        line.putAll(metricSums);
        return line;
    }

    /** Loss over all evaluation batches, weighted by loss units; adds {@code eval_loss} and {@code eval_*} to line. */
    double evaluate(Map<String, Object> line) {
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
}
