package dev.finetune.adapters.nf4;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.HostArrays;
import dev.finetune.recipes.AdapterSpec;
import java.lang.management.ManagementFactory;
import java.util.Arrays;
import java.util.Random;

/**
 * Prints NF4 costs for one 2048×2048 weight: Java quantization time, per-forward dequantization time (median of
 * timed repeats) and stored bytes per parameter. Run alone on the machine (OpenMP threads collapse under load).
 */
@SuppressWarnings("try") // scopes are held only for their extent
public final class Nf4Bench {
    /** CPU time of the whole process, engine threads included: a ratio far below the thread count means contention. */
    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    public static void main(String[] args) {
        int rows = 2048;
        int cols = 2048;
        int repeats = args.length > 0 ? Integer.parseInt(args[0]) : 40;
        Random random = new Random(1);
        float[] values = new float[rows * cols];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) (random.nextGaussian() * 0.02);
        }
        Shape shape = new Shape(rows, cols);
        try (NDManager manager = NDManager.newBaseManager()) {
            NDArray dense = HostArrays.floats(manager, values, shape, DataType.FLOAT32);
            for (boolean doubleQuant : new boolean[] {false, true}) {
                AdapterSpec.Nf4 spec = new AdapterSpec.Nf4(64, doubleQuant);
                long start = System.nanoTime();
                Nf4Quantized quantized = Nf4Quantized.quantize(dense, spec);
                double quantizeMs = (System.nanoTime() - start) / 1e6;
                Nf4Weight weight = Nf4Weight.upload(quantized, manager, DataType.FLOAT32);
                double[] times = new double[repeats];
                long cpuStart = processCpuNanos();
                long wallStart = System.nanoTime();
                for (int i = -5; i < repeats; i++) {
                    try (NDManager step = manager.newSubManager(); NDScope ignored = new NDScope()) {
                        long t0 = System.nanoTime();
                        NDArray restored = weight.dequantize(step);
                        restored.getFloat(0, 0); // forces completion on asynchronous devices
                        if (i >= 0) {
                            times[i] = (System.nanoTime() - t0) / 1e6;
                        }
                    }
                }
                double cpuPerWall = (processCpuNanos() - cpuStart) / (double) (System.nanoTime() - wallStart);
                Arrays.sort(times);
                System.out.printf("NF4 %dx%d double_quant=%s: quantize (Java) %.0f ms, dequantize median %.2f ms"
                                + " (min %.2f, max %.2f, n=%d, process CPU/wall %.2f with %d engine threads), stored %d bytes"
                                + " = %.4f bytes/param (float32: 4)%n",
                        rows, cols, doubleQuant, quantizeMs, times[repeats / 2], times[0], times[repeats - 1],
                        repeats, cpuPerWall, JniUtils.getNumThreads(), quantized.storageBytes(),
                        quantized.storageBytes() / (double) (rows * cols));
            }
        }
    }
}
