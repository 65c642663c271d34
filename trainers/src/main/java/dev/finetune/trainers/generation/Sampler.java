package dev.finetune.trainers.generation;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import dev.finetune.adapters.Scalars;
import java.util.SplittableRandom;

/**
 * Picks the next token of every row from logits {@code [B, V]}: argmax, or temperature → top-k → top-p (the order
 * Hugging Face applies them) and then inverse-CDF sampling with uniforms drawn in Java from the settings' seed
 * (the engine has no multinomial). The filtering stays on the engine, so nothing of vocabulary size crosses JNI.
 */
final class Sampler {
    private final Scalars scalars;

    Sampler(Scalars scalars) {
        this.scalars = scalars;
    }

    long[] choose(NDArray logits, GenerationSettings settings, SplittableRandom random) {
        if (settings.greedy()) {
            return logits.argMax(-1).toLongArray();
        }
        long vocab = logits.getShape().get(1);
        NDArray scaled = logits.div(scalars.of(settings.temperature()));
        if (settings.topK() > 0 && settings.topK() < vocab) {
            NDArray kth = scaled.topK(settings.topK(), -1, true, true).get(0).get(new NDIndex(":, -1:"));
            scaled = scaled.sub(scaled.lt(kth).toType(DataType.FLOAT32, false).mul(scalars.of(1e30f)));
        }
        NDArray probabilities = scaled.softmax(-1);
        if (settings.topP() < 1f) {
            NDArray ascending = probabilities.sort(-1);
            // A token stays if the mass of the tokens more likely than it is still below p; the most likely always stays.
            NDArray massAbove = scalars.of(1f).sub(ascending.cumSum(-1));
            NDArray dropped = massAbove.gte(scalars.of(settings.topP())).toType(DataType.FLOAT32, false);
            NDArray threshold = ascending.add(dropped.mul(scalars.of(2f))).min(new int[] {-1}, true);
            probabilities = probabilities.mul(probabilities.gte(threshold).toType(DataType.FLOAT32, false));
        }
        NDArray cdf = probabilities.cumSum(-1);
        NDArray total = cdf.get(new NDIndex(":, -1:"));
        int rows = (int) logits.getShape().get(0);
        float[] uniforms = new float[rows];
        for (int r = 0; r < rows; r++) {
            uniforms[r] = (float) (1.0 - random.nextDouble());
        }
        NDArray targets = logits.getManager().create(uniforms).expandDims(1).mul(total);
        long[] chosen = cdf.lt(targets).toType(DataType.INT64, false).sum(new int[] {-1}).toLongArray();
        for (int r = 0; r < rows; r++) {
            chosen[r] = Math.min(chosen[r], vocab - 1);
        }
        return chosen;
    }
}
