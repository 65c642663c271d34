package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** Values worked out by hand from the HF Trainer's schedule formulas (peak 1e-3, 110 updates, 10 of warm-up). */
class LrSchedulerTest {
    private static final double PEAK = 1e-3;

    @Test
    void warmupRisesLinearlyFromZeroForEverySchedule() {
        for (LrScheduler schedule : LrScheduler.values()) {
            assertEquals(0.0, schedule.learningRate(PEAK, 0, 0, 110, 10), 1e-15, schedule.key());
            assertEquals(5e-4, schedule.learningRate(PEAK, 0, 5, 110, 10), 1e-15, schedule.key());
            assertEquals(1e-3, schedule.learningRate(PEAK, 0, 10, 110, 10), 1e-15, schedule.key());
        }
    }

    @Test
    void cosineFallsAlongHalfAWaveToZero() {
        // progress p = (s - 10) / 100; lr = peak · (1 + cos(πp)) / 2
        assertEquals(1e-3 * (1 + Math.sqrt(0.5)) / 2, LrScheduler.COSINE.learningRate(PEAK, 0, 35, 110, 10), 1e-15);
        assertEquals(5e-4, LrScheduler.COSINE.learningRate(PEAK, 0, 60, 110, 10), 1e-15);
        assertEquals(1e-3 * (1 - Math.sqrt(0.5)) / 2, LrScheduler.COSINE.learningRate(PEAK, 0, 85, 110, 10), 1e-15);
        assertEquals(0.0, LrScheduler.COSINE.learningRate(PEAK, 0, 110, 110, 10), 1e-15);
    }

    @Test
    void cosineWithAFloorEndsAtThatFractionOfThePeak() {
        // factor = 0.1 + 0.9 · (1 + cos(πp)) / 2
        assertEquals(1e-3 * (0.1 + 0.9 * 0.5), LrScheduler.COSINE.learningRate(PEAK, 0.1, 60, 110, 10), 1e-15);
        assertEquals(1e-4, LrScheduler.COSINE.learningRate(PEAK, 0.1, 110, 110, 10), 1e-15);
        assertEquals(1e-3, LrScheduler.COSINE.learningRate(PEAK, 0.1, 10, 110, 10), 1e-15);
        assertEquals(7.5e-4, LrScheduler.LINEAR.learningRate(PEAK, 0.1, 35, 110, 10), 1e-15);
    }

    @Test
    void linearFallsToZeroAtTheLastUpdate() {
        assertEquals(7.5e-4, LrScheduler.LINEAR.learningRate(PEAK, 0, 35, 110, 10), 1e-15);
        assertEquals(1e-5, LrScheduler.LINEAR.learningRate(PEAK, 0, 109, 110, 10), 1e-15);
        assertEquals(0.0, LrScheduler.LINEAR.learningRate(PEAK, 0, 110, 110, 10), 1e-15);
    }

    @Test
    void constantHoldsThePeakAfterWarmupAndWithoutIt() {
        assertEquals(1e-3, LrScheduler.CONSTANT.learningRate(PEAK, 0, 77, 110, 10), 1e-15);
        assertEquals(1e-3, LrScheduler.CONSTANT.learningRate(PEAK, 0, 0, 110, 0), 1e-15);
    }

    @Test
    void constantWithWarmupIsTheConstantSchedule() {
        assertEquals(5e-4, LrScheduler.CONSTANT_WITH_WARMUP.learningRate(PEAK, 0, 5, 110, 10), 1e-15);
        assertEquals(1e-3, LrScheduler.CONSTANT_WITH_WARMUP.learningRate(PEAK, 0, 77, 110, 10), 1e-15);
    }
}
