package dev.finetune.trainers.train.grpo;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * GRPO's per-token objective, TRL's {@code grpo} aggregation: for completion tokens with log-probability
 * {@code logp}, the sampling policy's {@code old}, the reference's {@code ref} and the completion's advantage
 * {@code A}, {@code ratio = exp(logp − old)} and
 * <pre>  loss_t = −min(ratio·A, clip(ratio, 1−ε, 1+ε)·A) + β·(exp(ref − logp) − (ref − logp) − 1)</pre>
 * (the second term is the k3 estimator of KL(π‖π_ref), ≥ 0 and 0 when they agree). Each completion's loss is
 * the mean over its tokens; the batch's is the sum over completions, which the loop divides by their count.
 *
 * @param epsilon {@code trl.epsilon}: the clipping range
 * @param beta {@code trl.beta}: the KL weight; 0 skips the reference entirely
 */
public record GrpoLoss(double epsilon, double beta) {

    public record Result(NDArray sum, Map<String, Double> metrics) {}

    /**
     * @param logp {@code [N, T]} differentiable, 0 outside completions
     * @param old {@code [N, T]} constants: the log-probabilities the completions were sampled with
     * @param ref {@code [N, T]} constants, or {@code null} when {@code beta} is 0
     * @param mask {@code [N, T]} 1 on completion tokens
     * @param lengths completion tokens per row (rows with none contribute nothing)
     */
    public Result compute(NDArray logp, NDArray old, NDArray ref, double[] advantages, NDArray mask, int[] lengths,
            NDManager manager) {
        int rows = advantages.length;
        float[] a = new float[rows];
        float[] inverseLength = new float[rows];
        for (int r = 0; r < rows; r++) {
            a[r] = (float) advantages[r];
            inverseLength[r] = lengths[r] == 0 ? 0f : 1f / lengths[r];
        }
        NDArray advantage = manager.create(a, new Shape(rows, 1));
        NDArray ratio = logp.sub(old).exp();
        NDArray clipped = ratio.maximum(constant(manager, 1 - epsilon)).minimum(constant(manager, 1 + epsilon));
        NDArray perToken = ratio.mul(advantage).minimum(clipped.mul(advantage)).neg();
        NDArray kl = null;
        if (beta > 0) {
            NDArray toReference = ref.sub(logp);
            kl = toReference.exp().sub(toReference).sub(constant(manager, 1));
            perToken = perToken.add(kl.mul(constant(manager, beta)));
        }
        NDArray perCompletion = perToken.mul(mask).sum(new int[] {1})
                .mul(manager.create(inverseLength, new Shape(rows)));
        return new Result(perCompletion.sum(), metrics(ratio.toFloatArray(), kl == null ? null : kl.toFloatArray(),
                mask.toFloatArray(), advantages));
    }

    /** TRL's {@code kl} (mean over completion tokens) and {@code clip_ratio} (share of tokens the clip holds back). */
    private Map<String, Double> metrics(float[] ratio, float[] kl, float[] mask, double[] advantages) {
        int columns = ratio.length / advantages.length;
        double tokens = 0;
        double klSum = 0;
        double clippedTokens = 0;
        for (int i = 0; i < ratio.length; i++) {
            if (mask[i] == 0) {
                continue;
            }
            double advantage = advantages[i / columns];
            tokens++;
            klSum += kl == null ? 0 : kl[i];
            boolean clipped = (ratio[i] < 1 - epsilon && advantage < 0) || (ratio[i] > 1 + epsilon && advantage > 0);
            clippedTokens += clipped ? 1 : 0;
        }
        Map<String, Double> metrics = new LinkedHashMap<>();
        metrics.put("kl", tokens == 0 ? 0 : klSum / tokens);
        metrics.put("clip_ratio", tokens == 0 ? 0 : clippedTokens / tokens);
        return metrics;
    }

    private static NDArray constant(NDManager manager, double value) {
        return manager.full(new Shape(), (float) value, DataType.FLOAT32);
    }
}
