package dev.finetune.trainers.train.optim;

import ai.djl.ndarray.NDArray;
import dev.finetune.adapters.NamedArray;
import java.util.List;

/**
 * Global-norm gradient clipping, as {@code torch.nn.utils.clip_grad_norm_}: one norm over all trainable arrays,
 * one common scale. (DJL's own {@code clipGrad} clamps each element from above only.)
 */
public final class GradientClipping {
    private GradientClipping() {}

    /**
     * {@code sqrt(Σ‖g‖²)} over the gradients of {@code params}; read back once, after all sums are queued. Each
     * array's norm is one fused reduction: squaring first would write a copy of every gradient, all of them alive
     * until the caller's scope closes.
     */
    public static double globalNorm(List<NamedArray> params) {
        NDArray sumOfSquares = null;
        for (NamedArray param : params) {
            NDArray squares = param.array().getGradient().norm().square();
            sumOfSquares = sumOfSquares == null ? squares : sumOfSquares.add(squares);
        }
        return sumOfSquares == null ? 0.0 : Math.sqrt(sumOfSquares.toType(ai.djl.ndarray.types.DataType.FLOAT64, false)
                .getDouble());
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
