package dev.finetune.trainers.train.grpo;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.recipes.GrpoLossType;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * GRPO's per-token objective as TRL 1.13's {@code _compute_loss} writes it: for completion tokens with
 * log-probability {@code logp}, the sampling policy's {@code old}, the reference's {@code ref} and the completion's
 * advantage {@code A}, {@code r = exp(logp − old)} (bounded above by {@code delta} when given) and
 * <pre>  loss_t = −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) + β·(exp(ref − logp) − (ref − logp) − 1)</pre>
 * (the second term is the k3 estimator of KL(π‖π_ref), ≥ 0 and 0 when they agree; with {@code biasCorrectedKl},
 * TRL's default {@code use_bias_correction_kl}, it is multiplied by {@code r}, whose gradient makes the KL gradient
 * unbiased even on-policy). How the token losses become
 * one number is {@link GrpoLossType}: per-completion means ({@code grpo}), the batch's token mean ({@code bnpo}),
 * a sum over completions × {@code max_completion_length} ({@code dr_grpo}) or over the window's tokens
 * ({@code dapo}).
 *
 * @param epsilonLow {@code trl.epsilon}
 * @param epsilonHigh {@code trl.epsilon_high} ({@code epsilon} when not given)
 * @param delta {@code trl.delta}, or {@code null}
 * @param beta {@code trl.beta}: the KL weight; 0 skips the reference entirely
 */
public record GrpoLoss(GrpoLossType type, double epsilonLow, double epsilonHigh, Double delta, double beta,
        boolean biasCorrectedKl, int maxCompletionLength) {

    /** TRL's {@code grpo} loss with symmetric clipping and the plain k3 KL term. */
    public GrpoLoss(double epsilon, double beta) {
        this(GrpoLossType.GRPO, epsilon, epsilon, null, beta, false, 1);
    }

    /**
     * @param sum the batch's loss in the loop's units (see {@link dev.finetune.trainers.train.Objective.Loss})
     * @param units what {@code sum} is summed over when it is not the batch's completions: the completion
     *     tokens for {@code dapo}, else {@code null}
     */
    public record Result(NDArray sum, Double units, Map<String, Double> metrics) {}

    /**
     * @param logp {@code [N, T]} differentiable, 0 outside completions
     * @param old {@code [N, T]} constants: the log-probabilities the completions were sampled with
     * @param ref {@code [N, T]} constants, or {@code null} when {@code beta} is 0
     * @param mask {@code [N, T]} 1 on the completion tokens that count (0 for masked truncated completions)
     */
    public Result compute(NDArray logp, NDArray old, NDArray ref, double[] advantages, float[] mask,
            NDManager manager) {
        int rows = advantages.length;
        int columns = mask.length / rows;
        float[] a = new float[rows];
        float[] perRowScale = new float[rows];
        double tokens = 0;
        int[] lengths = new int[rows];
        for (int r = 0; r < rows; r++) {
            a[r] = (float) advantages[r];
            for (int t = 0; t < columns; t++) {
                lengths[r] += mask[r * columns + t] != 0 ? 1 : 0;
            }
            tokens += lengths[r];
        }
        // each row's token sum is scaled so that the batch's sum is in the loop's units: per completion
        Double units = null;
        for (int r = 0; r < rows; r++) {
            perRowScale[r] = switch (type) {
                case GRPO -> 1f / Math.max(1, lengths[r]);
                case BNPO -> (float) (rows / Math.max(1, tokens));
                case DR_GRPO -> 1f / maxCompletionLength;
                case DAPO -> 1f;
            };
        }
        if (type == GrpoLossType.DAPO) {
            units = tokens;
        }
        NDArray weight = manager.create(mask, new Shape(rows, columns));
        NDArray advantage = manager.create(a, new Shape(rows, 1));
        NDArray ratio = logp.sub(old).exp();
        NDArray clipped = ratio.maximum(constant(manager, 1 - epsilonLow)).minimum(constant(manager, 1 + epsilonHigh));
        NDArray unclipped = delta == null ? ratio : ratio.minimum(constant(manager, delta));
        NDArray perToken = unclipped.mul(advantage).minimum(clipped.mul(advantage)).neg();
        NDArray kl = null;
        if (beta != 0) {
            NDArray toReference = ref.sub(logp);
            kl = toReference.exp().sub(toReference).sub(constant(manager, 1));
            if (biasCorrectedKl) {
                kl = kl.mul(ratio);
            }
            perToken = perToken.add(kl.mul(constant(manager, beta)));
        }
        NDArray sum = perToken.mul(weight).sum(new int[] {1}).mul(manager.create(perRowScale, new Shape(rows))).sum();
        return new Result(sum, units, metrics(unclipped.toFloatArray(), kl == null ? null : kl.toFloatArray(), mask,
                advantages));
    }

    /**
     * TRL's {@code kl} (mean over the batch's completion tokens; absent at beta 0, as in TRL) and
     * {@code clip_ratio/*}: the share of tokens the clip holds back below and above, both, and the smallest and
     * largest per-completion shares, judged on the ratio after {@code delta} bounds it, as TRL does.
     */
    private Map<String, Double> metrics(float[] ratio, float[] kl, float[] mask, double[] advantages) {
        int rows = advantages.length;
        int columns = ratio.length / rows;
        double tokens = 0;
        double klSum = 0;
        double low = 0;
        double high = 0;
        double lowMin = Double.NaN;
        double highMax = Double.NaN;
        for (int r = 0; r < rows; r++) {
            double rowTokens = 0;
            double rowLow = 0;
            double rowHigh = 0;
            for (int t = 0; t < columns; t++) {
                int i = r * columns + t;
                if (mask[i] == 0) {
                    continue;
                }
                rowTokens++;
                klSum += kl == null ? 0 : kl[i];
                rowLow += ratio[i] < 1 - epsilonLow && advantages[r] < 0 ? 1 : 0;
                rowHigh += ratio[i] > 1 + epsilonHigh && advantages[r] > 0 ? 1 : 0;
            }
            tokens += rowTokens;
            low += rowLow;
            high += rowHigh;
            if (rowTokens > 0) {
                lowMin = Double.isNaN(lowMin) ? rowLow / rowTokens : Math.min(lowMin, rowLow / rowTokens);
                highMax = Double.isNaN(highMax) ? rowHigh / rowTokens : Math.max(highMax, rowHigh / rowTokens);
            }
        }
        double count = Math.max(1, tokens);
        Map<String, Double> metrics = new LinkedHashMap<>();
        if (kl != null) {
            metrics.put("kl", klSum / count);
        }
        metrics.put("clip_ratio/low_mean", low / count);
        metrics.put("clip_ratio/high_mean", high / count);
        metrics.put("clip_ratio/region_mean", (low + high) / count);
        metrics.put("clip_ratio/low_min", Double.isNaN(lowMin) ? 0 : lowMin);
        metrics.put("clip_ratio/high_max", Double.isNaN(highMax) ? 0 : highMax);
        return metrics;
    }

    private static NDArray constant(NDManager manager, double value) {
        return manager.full(new Shape(), (float) value, DataType.FLOAT32);
    }
}
