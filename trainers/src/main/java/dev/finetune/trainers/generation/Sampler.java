package dev.finetune.trainers.generation;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import dev.finetune.adapters.Scalars;
import java.util.List;
import java.util.SplittableRandom;

/**
 * Picks the next token of every row from logits {@code [B, V]}: the repetition penalty, then argmax, or
 * temperature → top-k → top-p → min-p (the order Hugging Face applies them) and then inverse-CDF sampling with uniforms drawn in Java from the settings' seed
 * (the engine has no multinomial). The filtering stays on the engine, so nothing of vocabulary size crosses JNI.
 */
final class Sampler {
    private final Scalars scalars;

    Sampler(Scalars scalars) {
        this.scalars = scalars;
    }

    /**
     * @param history every row's tokens so far (prompt and generated), read only for the repetition penalty
     */
    long[] choose(NDArray logits, GenerationSettings settings, SplittableRandom random, List<long[]> history) {
        // NaN or Inf logits make argmax pick token 0 and sampling pick the last token: a silent, wrong continuation
        if (!finite(logits)) {
            throw new NonFiniteLogits();
        }
        if (settings.repetitionPenalty() != 1f) {
            logits = penalize(logits, settings.repetitionPenalty(), history);
        }
        if (settings.greedy()) {
            return logits.argMax(-1).toLongArray();
        }
        long vocab = logits.getShape().get(1);
        NDArray scaled = logits.div(scalars.of(settings.temperature()));
        if (!finite(scaled)) {
            throw new dev.finetune.recipes.UserError("temperature", "temperature " + settings.temperature()
                    + " is so small that the scaled logits overflow to infinity, so no token can be sampled",
                    "use temperature 0 (greedy: the most likely token), or a temperature of at least 0.01");
        }
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
        if (settings.minP() > 0f) {
            NDArray floor = probabilities.max(new int[] {-1}, true).mul(scalars.of(settings.minP()));
            probabilities = probabilities.mul(probabilities.gte(floor).toType(DataType.FLOAT32, false));
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

    private static boolean finite(NDArray values) {
        return !values.isNaN().logicalOr(values.isInfinite()).any().getBoolean();
    }

    /** transformers' repetition penalty: seen tokens' logits divided by the penalty when positive, else multiplied. */
    private NDArray penalize(NDArray logits, float penalty, List<long[]> history) {
        int rows = (int) logits.getShape().get(0);
        int vocab = (int) logits.getShape().get(1);
        float[] seen = new float[rows * vocab];
        for (int r = 0; r < rows; r++) {
            for (long token : history.get(r)) {
                if (token >= 0 && token < vocab) {
                    seen[r * vocab + (int) token] = 1f;
                }
            }
        }
        NDArray mask = logits.getManager().create(seen, logits.getShape());
        NDArray positive = logits.gt(scalars.of(0f)).toType(DataType.FLOAT32, false);
        // factor 1/p on positive seen logits, p on negative seen ones, 1 elsewhere
        NDArray factor = positive.mul(scalars.of(1f / penalty)).add(scalars.of(1f).sub(positive).mul(scalars.of(penalty)));
        NDArray scale = scalars.of(1f).add(mask.mul(factor.sub(scalars.of(1f))));
        return logits.mul(scale);
    }
}
