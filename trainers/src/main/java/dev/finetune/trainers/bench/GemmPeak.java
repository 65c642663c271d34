package dev.finetune.trainers.bench;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.jni.JniUtils;
import java.io.PrintWriter;
import java.util.Arrays;
import java.util.Locale;

/** fp32 {@code 2048×2048 · 2048×2048} through the engine, the same measurement as the peer's {@code gemm_peak.py}. */
public final class GemmPeak {
    private GemmPeak() {}

    public static void measure(PrintWriter out) {
        int n = 2048;
        int runs = 10;
        double[] seconds = new double[runs];
        CpuCounters start;
        CpuCounters end;
        try (NDManager manager = NDManager.newBaseManager()) {
            Engine.getInstance().setRandomSeed((int) TrainingBench.SEED);
            NDArray a = manager.randomNormal(new Shape(n, n));
            NDArray b = manager.randomNormal(new Shape(n, n));
            for (int i = 0; i < 2; i++) {
                try (NDScope scope = new NDScope()) {
                    a.matMul(b);
                }
            }
            start = CpuCounters.now();
            for (int i = 0; i < runs; i++) {
                try (NDScope scope = new NDScope()) {
                    long t0 = System.nanoTime();
                    a.matMul(b);
                    seconds[i] = (System.nanoTime() - t0) / 1e9;
                }
            }
            end = CpuCounters.now();
        }
        double[] sorted = seconds.clone();
        Arrays.sort(sorted);
        double flops = 2.0 * n * n * n;
        out.printf(Locale.ROOT, "finetune gemm_peak_gflops=%.1f n=%d runs=%d gflops_max=%.1f gflops_min=%.1f threads=%d "
                        + "cpu_per_wall=%.2f other_cpu=%.2f%n",
                flops / TrainingBench.median(sorted) / 1e9, n, runs, flops / sorted[0] / 1e9, flops / sorted[runs - 1] / 1e9,
                JniUtils.getNumThreads(), start.cpuPerWallUntil(end), CpuCounters.otherShare(start, end));
        out.flush();
    }
}
