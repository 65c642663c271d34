package dev.finetune.trainers.train.sft;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import dev.finetune.trainers.train.ForwardPass;
import dev.finetune.trainers.train.ModelInputs;
import dev.finetune.trainers.train.Objective;
import java.util.Map;

/**
 * Token-level cross-entropy over the labelled tokens, summed; the loop divides by the window's target count.
 *
 * <p>The label shift and the ignore mask are built in Java, so the graph holds no op on labels and no Java
 * {@code Number} operand: targets sit under the position that predicts them, and ignored positions get target 0
 * with weight 0 (exactly zero gradient).
 */
public final class SftObjective implements Objective<SftBatch> {

    @Override
    public Loss loss(SftBatch batch, ForwardPass forward, NDManager manager) {
        Shape shape = new Shape(batch.rows(), batch.columns());
        ModelInputs inputs = new ModelInputs(
                manager.create(batch.inputIds(), shape),
                manager.create(batch.positionIds(), shape),
                manager.create(batch.segmentIds(), shape));
        NDArray logits = forward.logits(inputs);
        NDArray logProbabilities = logits.logSoftmax(-1);
        // Backward needs the log-softmax, not the logits: free the step's largest array ([B, T, V]) before backward
        // rather than when the step's scope closes. Autograd holds its own references to what it saved.
        logits.close();
        NDArray sum = sumOfTargetLosses(logProbabilities, batch, manager);
        return new Loss(sum, tokenMetrics(logProbabilities, batch));
    }

    /**
     * TRL's {@code mean_token_accuracy} (the argmax is the target) and {@code entropy} of the predicted
     * distribution, both over the target tokens. Read outside the graph one row at a time, so the temporaries
     * stay at one row's {@code [T, V]}.
     */
    static Map<String, Double> tokenMetrics(NDArray logProbabilities, SftBatch batch) {
        int rows = batch.rows();
        int columns = batch.columns();
        long[] labels = batch.labels();
        double entropy = 0;
        long correct = 0;
        long targets = 0;
        boolean gradMode = ai.djl.pytorch.jni.JniUtils.isGradMode();
        ai.djl.pytorch.jni.JniUtils.setGradMode(false);
        try (NDArray detached = logProbabilities.stopGradient()) {
            for (int r = 0; r < rows; r++) {
                float[] h;
                long[] best;
                try (NDArray row = detached.get(r); NDArray p = row.exp(); NDArray plogp = p.mul(row);
                        NDArray sum = plogp.sum(new int[] {-1}); NDArray argmax = row.argMax(-1)) {
                    h = sum.toFloatArray();
                    best = argmax.toLongArray();
                }
                for (int t = 0; t + 1 < columns; t++) {
                    long next = labels[r * columns + t + 1];
                    if (next != SftBatch.IGNORE) {
                        targets++;
                        entropy -= h[t];
                        correct += best[t] == next ? 1 : 0;
                    }
                }
            }
        } finally {
            ai.djl.pytorch.jni.JniUtils.setGradMode(gradMode);
        }
        return Map.of("mean_token_accuracy", targets == 0 ? 0.0 : (double) correct / targets,
                "entropy", targets == 0 ? 0.0 : entropy / targets);
    }

    /** Σ over target tokens of {@code -log softmax(logits)[target]}; {@code logits [B, T, V]}. */
    static NDArray sumOfTokenLosses(NDArray logits, SftBatch batch, NDManager manager) {
        return sumOfTargetLosses(logits.logSoftmax(-1), batch, manager);
    }

    private static NDArray sumOfTargetLosses(NDArray logProbabilities, SftBatch batch, NDManager manager) {
        int rows = batch.rows();
        int columns = batch.columns();
        long[] labels = batch.labels();
        long[] targets = new long[rows * columns];
        float[] weights = new float[rows * columns];
        for (int r = 0; r < rows; r++) {
            for (int t = 0; t + 1 < columns; t++) {
                long next = labels[r * columns + t + 1];
                if (next != SftBatch.IGNORE) {
                    targets[r * columns + t] = next;
                    weights[r * columns + t] = 1f;
                }
            }
        }
        Shape shape = new Shape(rows, columns);
        NDArray targetIndex = manager.create(targets, shape).expandDims(-1);
        NDArray weight = manager.create(weights, shape);
        NDArray targetLogProbabilities = logProbabilities.gather(targetIndex, -1).squeeze(-1);
        return targetLogProbabilities.mul(weight).sum().neg();
    }
}
