package dev.finetune.trainers.backend;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.plan.RunPlan;

/**
 * This machine's CPU rates through the engine the trainer uses: the float32 matrix-multiply rate at the shape of a
 * model's MLP projection (a micro batch of tokens times hidden × intermediate), because small matrices run far below
 * the peak and the time estimate should see what training will see; the bandwidth of an elementwise op on arrays
 * past the L2 cache; and the round trip of one call on a tiny tensor. Measured when asked, never cached: the
 * shared cores' load is part of what the run will get.
 */
public final class GemmRate implements RunPlan.CpuRate {
    /** The rate as the plan asks for it. */
    public static final GemmRate ENGINE = new GemmRate();

    /**
     * 4 MiB per operand, past a core's L2 and the size of a small model's attention scores. The result is a new array
     * each time, as every op of a training step writes a fresh output (that, not the arithmetic, sets the rate: in place
     * the same add runs 5-7 times faster here). Small, because the probe runs inside the training process, whose peak
     * resident memory it must not raise (three 16 MiB arrays did, by up to 128 MB).
     */
    private static final int BANDWIDTH_ELEMENTS = 1 << 20;
    private static final int BANDWIDTH_REPEATS = 15;
    /** Calls timed one by one; the median is the rate. */
    private static final int CALL_REPEATS = 201;
    /** Enough repetitions for about 50 ms of work at a few GFLOPS, and at least three. */
    private static final double TARGET_FLOPS = 5e8;
    /** Rows beyond this change the rate little and only cost time. */
    private static final int MOST_ROWS = 1024;

    private GemmRate() {}

    /** @return FLOP/s at the median of the timed runs, each {@code 2·m·k·n} FLOPs */
    @Override
    public double flops(ModelConfig c, long tokensPerMicroStep) {
        int m = (int) Math.max(1, Math.min(MOST_ROWS, tokensPerMicroStep));
        int k = c.hiddenSize();
        int n = c.intermediateSize();
        double flops = 2.0 * m * k * n;
        int repeats = (int) Math.max(3, Math.min(200, TARGET_FLOPS / flops));
        try (NDManager manager = NDManager.newBaseManager()) {
            NDArray a = manager.randomUniform(-1, 1, new Shape(m, k), DataType.FLOAT32);
            NDArray b = manager.randomUniform(-1, 1, new Shape(k, n), DataType.FLOAT32);
            a.matMul(b).close(); // warm-up: thread pool and allocator
            double[] seconds = new double[repeats];
            for (int i = 0; i < repeats; i++) {
                long start = System.nanoTime();
                a.matMul(b).close(); // the CPU engine runs each op to completion before returning
                seconds[i] = (System.nanoTime() - start) / 1e9;
            }
            java.util.Arrays.sort(seconds);
            return flops / seconds[repeats / 2];
        }
    }

    /** Bytes per second of {@code a + b} into a new array: two operands read, one result written. */
    @Override
    public double bandwidth() {
        try (NDManager manager = NDManager.newBaseManager()) {
            NDArray a = manager.ones(new Shape(BANDWIDTH_ELEMENTS), DataType.FLOAT32);
            NDArray b = manager.ones(new Shape(BANDWIDTH_ELEMENTS), DataType.FLOAT32);
            a.add(b).close();
            double seconds = median(BANDWIDTH_REPEATS, () -> a.add(b).close());
            return 3.0 * 4 * BANDWIDTH_ELEMENTS / seconds;
        }
    }

    @Override
    public double secondsPerCall() {
        try (NDManager manager = NDManager.newBaseManager()) {
            NDArray a = manager.ones(new Shape(1), DataType.FLOAT32);
            NDArray b = manager.ones(new Shape(1), DataType.FLOAT32);
            a.add(b).close();
            return median(CALL_REPEATS, () -> a.add(b).close());
        }
    }

    private static double median(int repeats, Runnable op) {
        double[] seconds = new double[repeats];
        for (int i = 0; i < repeats; i++) {
            long start = System.nanoTime();
            op.run();
            seconds[i] = (System.nanoTime() - start) / 1e9;
        }
        java.util.Arrays.sort(seconds);
        return seconds[repeats / 2];
    }

    @Override
    public String how(ModelConfig c, long tokensPerMicroStep) {
        int m = (int) Math.max(1, Math.min(MOST_ROWS, tokensPerMicroStep));
        return "fp32 GEMM " + m + "×" + c.hiddenSize() + "·" + c.hiddenSize() + "×" + c.intermediateSize();
    }
}
