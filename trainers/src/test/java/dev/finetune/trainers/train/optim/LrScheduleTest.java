package dev.finetune.trainers.train.optim;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** Values worked out by hand from the HF Trainer's schedule formulas (peak 1e-3, 110 updates, 10 of warm-up). */
class LrScheduleTest {
    private static final double PEAK = 1e-3;

    @Test
    void warmupRisesLinearlyFromZeroForEverySchedule() {
        for (LrSchedule schedule : LrSchedule.values()) {
            assertEquals(0.0, schedule.learningRate(PEAK, 0, 0, 110, 10), 1e-15, schedule.key());
            assertEquals(5e-4, schedule.learningRate(PEAK, 0, 5, 110, 10), 1e-15, schedule.key());
            assertEquals(1e-3, schedule.learningRate(PEAK, 0, 10, 110, 10), 1e-15, schedule.key());
        }
    }

    @Test
    void cosineFallsAlongHalfAWaveToZero() {
        // progress p = (s - 10) / 100; lr = peak · (1 + cos(πp)) / 2
        assertEquals(1e-3 * (1 + Math.sqrt(0.5)) / 2, LrSchedule.COSINE.learningRate(PEAK, 0, 35, 110, 10), 1e-15);
        assertEquals(5e-4, LrSchedule.COSINE.learningRate(PEAK, 0, 60, 110, 10), 1e-15);
        assertEquals(1e-3 * (1 - Math.sqrt(0.5)) / 2, LrSchedule.COSINE.learningRate(PEAK, 0, 85, 110, 10), 1e-15);
        assertEquals(0.0, LrSchedule.COSINE.learningRate(PEAK, 0, 110, 110, 10), 1e-15);
    }

    @Test
    void cosineWithAFloorEndsAtThatFractionOfThePeak() {
        // factor = 0.1 + 0.9 · (1 + cos(πp)) / 2
        assertEquals(1e-3 * (0.1 + 0.9 * 0.5), LrSchedule.COSINE.learningRate(PEAK, 0.1, 60, 110, 10), 1e-15);
        assertEquals(1e-4, LrSchedule.COSINE.learningRate(PEAK, 0.1, 110, 110, 10), 1e-15);
        assertEquals(1e-3, LrSchedule.COSINE.learningRate(PEAK, 0.1, 10, 110, 10), 1e-15);
        assertEquals(7.5e-4, LrSchedule.LINEAR.learningRate(PEAK, 0.1, 35, 110, 10), 1e-15);
    }

    @Test
    void linearFallsToZeroAtTheLastUpdate() {
        assertEquals(7.5e-4, LrSchedule.LINEAR.learningRate(PEAK, 0, 35, 110, 10), 1e-15);
        assertEquals(1e-5, LrSchedule.LINEAR.learningRate(PEAK, 0, 109, 110, 10), 1e-15);
        assertEquals(0.0, LrSchedule.LINEAR.learningRate(PEAK, 0, 110, 110, 10), 1e-15);
    }

    @Test
    void constantHoldsThePeakAfterWarmupAndWithoutIt() {
        assertEquals(1e-3, LrSchedule.CONSTANT.learningRate(PEAK, 0, 77, 110, 10), 1e-15);
        assertEquals(1e-3, LrSchedule.CONSTANT.learningRate(PEAK, 0, 0, 110, 0), 1e-15);
    }

    @Test
    void warmupStepsWinOverTheRatioWhichRoundsUp() {
        assertEquals(10, LrSchedule.warmupUpdates(0, 0.1, 95)); // ceil(9.5)
        assertEquals(3, LrSchedule.warmupUpdates(3, 0.5, 95));
        assertEquals(0, LrSchedule.warmupUpdates(0, 0.0, 95));
    }
}
