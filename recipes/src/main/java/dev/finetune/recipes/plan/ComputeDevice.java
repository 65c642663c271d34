package dev.finetune.recipes.plan;

import java.util.Locale;

/**
 * How fast one device trains, for the time estimate: a peak rate and the share of it a training step reaches
 * (model FLOPs utilisation).
 *
 * @param label what the peak is, printed with the estimate
 * @param peakFlops floating-point operations per second at the training's compute dtype
 * @param utilization share of {@code peakFlops} the training reaches
 * @param bandwidth device memory bytes per second, 0 when unknown (generation is then bounded by FLOPs only)
 * @param secondsPerCall one engine call on a tiny tensor, measured on a CPU; 0 on a GPU, whose worker's per-op cost
 *     hides behind the kernels of large models and is not modelled
 */
public record ComputeDevice(String label, double peakFlops, double utilization, double bandwidth, double secondsPerCall) {

    /**
     * Utilisation assumed on a GPU. Eager transformers + PEFT training without torch.compile typically reaches 30–50 %
     * of the dense peak; torchtune's published Llama 3.1 numbers (compiled, TT_NOV24 in its Nov 2024 table:
     * 70B LoRA, 3497 tokens/s on 8 × A100) work out to about 59 %, an upper end we do not assume.
     */
    public static final double GPU_UTILIZATION = 0.40;
    /**
     * Utilisation assumed on a CPU, relative to the GEMM rate measured on this machine at the model's projection
     * shape. What the trainer does besides matmuls (engine calls, attention scores, norms, the loss, the optimizer) is
     * charged on its own ({@link CpuOverhead}), so the matmuls are taken at the measured rate; backward GEMMs on
     * transposed operands and LoRA's rank-r products run somewhat below it, which the estimate does not guess at.
     */
    public static final double CPU_UTILIZATION = 1.0;

    public ComputeDevice {
        if (!(peakFlops > 0) || !(utilization > 0) || utilization > 1) {
            throw new IllegalArgumentException("peak " + peakFlops + ", utilisation " + utilization);
        }
    }

    /**
     * A GPU of the table at the training's compute dtype: the 16-bit tensor peak when activations are 16-bit, plain
     * fp32 otherwise.
     *
     * @param tflops the recipe's override of the peak, or {@code null}
     * @param utilization the recipe's override, or {@code null} for {@link #GPU_UTILIZATION}
     */
    public static ComputeDevice gpu(Accelerator a, PrecisionRegime regime, Double tflops, Double utilization) {
        boolean half = regime.activation() == 2;
        double peak = tflops != null ? tflops : half ? a.halfTflops() : a.fp32Tflops();
        String what = tflops != null ? "given peak" : (half ? "16-bit" : "fp32") + " dense peak";
        return new ComputeDevice(a.name() + ", " + what + " " + fmt(peak) + " TFLOPS", peak * 1e12,
                utilization != null ? utilization : GPU_UTILIZATION, a.bandwidthTbs() * 1e12, 0);
    }

    /** A GPU known only by the peak the recipe gives. */
    public static ComputeDevice gpu(double tflops, Double utilization) {
        return new ComputeDevice("GPU, given peak " + fmt(tflops) + " TFLOPS", tflops * 1e12,
                utilization != null ? utilization : GPU_UTILIZATION, 0, 0);
    }

    /**
     * This machine's CPU at the rates measured on it: matrix multiply, elementwise bandwidth and one engine call.
     */
    public static ComputeDevice cpu(double measuredFlops, String how, Double utilization, double bandwidth, double secondsPerCall) {
        return new ComputeDevice("this CPU, measured " + how + " " + fmt(measuredFlops / 1e9) + " GFLOPS", measuredFlops,
                utilization != null ? utilization : CPU_UTILIZATION, bandwidth, secondsPerCall);
    }

    /** FLOP/s a training step achieves. */
    public double effectiveFlops() {
        return peakFlops * utilization;
    }

    static String fmt(double v) {
        return v >= 100 || v == Math.rint(v) ? String.format(Locale.ROOT, "%.0f", v) : String.format(Locale.ROOT, "%.3g", v);
    }
}
