package dev.finetune.trainers.train.optim;

import dev.finetune.adapters.NamedArray;
import java.util.List;

/**
 * Global-norm gradient clipping, as {@code torch.nn.utils.clip_grad_norm_}: one norm over all trainable arrays,
 * one common scale. (DJL's own {@code clipGrad} clamps each element from above only.)
 */
public final class GradientClipping {
    private GradientClipping() {}

    /**
     * {@code sqrt(Σ‖g‖²)} over the gradients of {@code params}, arrays without one skipped: one native call over
     * all of them ({@link OptimizerScript}), summed in float64.
     */
    public static double globalNorm(List<NamedArray> params) {
        return OptimizerScript.gradientNorm(params.stream().map(NamedArray::array).toList());
    }

    /**
     * The factor every gradient is multiplied by: {@code maxNorm / (norm + 1e-6)} when the norm exceeds
     * {@code maxNorm}, else 1; {@code maxNorm ≤ 0} switches clipping off.
     */
    public static double scale(double norm, double maxNorm) {
        if (maxNorm <= 0) {
            return 1.0;
        }
        return Math.min(1.0, maxNorm / (norm + 1e-6));
    }
}
