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
        SftBatch.Targets targets = batch.targets();
        TokenScores.Sft scored = forward.sft(inputs, targets.ids(), targets.weights(), manager);
        return new Loss(scored.loss(), tokenMetrics(scored, targets));
    }

    /**
     * TRL's {@code mean_token_accuracy} (the argmax is the target) and {@code entropy} of the predicted
     * distribution, both over the target tokens.
     */
    static Map<String, Double> tokenMetrics(TokenScores.Sft scored, SftBatch.Targets targets) {
        double entropy = 0;
        long correct = 0;
        long count = 0;
        float[] weights = targets.weights();
        for (int i = 0; i < weights.length; i++) {
            if (weights[i] != 0) {
                count++;
                entropy += scored.entropy()[i];
                correct += scored.correct()[i] != 0 ? 1 : 0;
            }
        }
        return Map.of("mean_token_accuracy", count == 0 ? 0.0 : (double) correct / count,
                "entropy", count == 0 ? 0.0 : entropy / count);
    }

    /**
     * Σ over target tokens of {@code -log softmax(logits)[target]}, with the metrics; {@code logits [B, T, V]},
     * which this consumes when they carry a gradient ({@link TokenScores}).
     */
    static TokenScores.Sft score(NDArray logits, SftBatch batch, NDManager manager) {
        SftBatch.Targets targets = batch.targets();
        return TokenScores.sft(logits, targets.ids(), targets.weights(), manager);
    }

    /** {@link #score}'s loss alone. */
    static NDArray sumOfTokenLosses(NDArray logits, SftBatch batch, NDManager manager) {
        return score(logits, batch, manager).loss();
    }
}
