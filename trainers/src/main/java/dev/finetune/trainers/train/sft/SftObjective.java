package dev.finetune.trainers.train.sft;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import dev.finetune.trainers.train.ForwardPass;
import dev.finetune.trainers.train.ModelInputs;
import dev.finetune.trainers.train.Objective;
import dev.finetune.trainers.train.TokenScores;
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
        Targets targets = Targets.of(batch);
        TokenScores.Sft scored = forward.sft(inputs, targets.ids(), targets.weights(), manager);
        return new Loss(scored.loss(), tokenMetrics(scored, batch));
    }

    /**
     * Each position's target, the token after it, and weight: 1 for a labelled target, else 0 with target 0
     * (exactly zero gradient).
     */
    private record Targets(long[] ids, float[] weights) {
        static Targets of(SftBatch batch) {
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
            return new Targets(targets, weights);
        }
    }

    /**
     * TRL's {@code mean_token_accuracy} (the argmax is the target) and {@code entropy} of the predicted
     * distribution, both over the target tokens.
     */
    static Map<String, Double> tokenMetrics(TokenScores.Sft scored, SftBatch batch) {
        int columns = batch.columns();
        long[] labels = batch.labels();
        double entropy = 0;
        long correct = 0;
        long targets = 0;
        for (int r = 0; r < batch.rows(); r++) {
            for (int t = 0; t + 1 < columns; t++) {
                if (labels[r * columns + t + 1] != SftBatch.IGNORE) {
                    targets++;
                    entropy += scored.entropy()[r * columns + t];
                    correct += scored.correct()[r * columns + t] != 0 ? 1 : 0;
                }
            }
        }
        return Map.of("mean_token_accuracy", targets == 0 ? 0.0 : (double) correct / targets,
                "entropy", targets == 0 ? 0.0 : entropy / targets);
    }

    /**
     * Σ over target tokens of {@code -log softmax(logits)[target]}, with the metrics; {@code logits [B, T, V]},
     * which this consumes when they carry a gradient ({@link TokenScores}).
     */
    static TokenScores.Sft score(NDArray logits, SftBatch batch, NDManager manager) {
        Targets targets = Targets.of(batch);
        return TokenScores.sft(logits, targets.ids(), targets.weights(), manager);
    }

    /** {@link #score}'s loss alone. */
    static NDArray sumOfTokenLosses(NDArray logits, SftBatch batch, NDManager manager) {
        return score(logits, batch, manager).loss();
    }
}
