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

    /** The learning rate of every update of a 110-step recipe with 10 warm-up steps and {@code keys}, read as written. */
    static double[] schedule(java.nio.file.Path dir, String keys) throws java.io.IOException {
        java.nio.file.Files.writeString(dir.resolve("d.jsonl"), "{\"text\": \"x\"}\n");
        java.nio.file.Path file = dir.resolve("r.yaml");
        java.nio.file.Files.writeString(file, "base_model: org/model\nlearning_rate: 1e-3\nmicro_batch_size: 1\n"
                + "gradient_accumulation_steps: 1\nmax_steps: 110\nwarmup_steps: 10\nlr_scheduler: cosine\n"
                + "datasets: [{path: d.jsonl, type: completion}]\n" + keys + "\n");
        Recipe recipe = ValidatedRecipe.load(file, java.util.List.of()).recipe();
        SchedulePlan plan = SchedulePlan.of(recipe, 1, 110, false);
        double[] lr = new double[110];
        for (int step = 0; step < 110; step++) {
            lr[step] = plan.learningRate(recipe.training(), step);
        }
        return lr;
    }

    @Test
    void lrQuadraticWarmupRisesAsTheSquare(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws java.io.IOException {
        double[] linear = schedule(dir, "");
        double[] quadratic = schedule(dir, "lr_quadratic_warmup: true");
        assertEquals(5e-4, linear[5], 1e-15);
        assertEquals(2.5e-4, quadratic[5], 1e-15);
        for (int step = 10; step < 110; step++) {
            assertEquals(linear[step], quadratic[step], 1e-15, "the cosine after the warm-up is the same");
        }
    }

    @Test
    void cosineConstantLrRatioHoldsTheFloorFromThatShareOfTheSteps(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
            throws java.io.IOException {
        double[] floor = schedule(dir, "cosine_min_lr_ratio: 0.1");
        double[] held = schedule(dir, "cosine_min_lr_ratio: 0.1\ncosine_constant_lr_ratio: 0.5");
        // the cosine reaches the floor at update 55 (half of 110) instead of 110, then stays there
        assertEquals(1e-4 + 0.9e-3 * 0.5 * (1 + Math.cos(Math.PI * 22 / 45.0)), held[32], 1e-15);
        for (int step = 55; step < 110; step++) {
            assertEquals(1e-4, held[step], 1e-15);
        }
        assertEquals(1e-4 + 0.9e-3 * 0.5 * (1 + Math.cos(Math.PI * 45 / 100.0)), floor[55], 1e-15);
        assertEquals(floor[5], held[5], 1e-15, "the warm-up is unchanged");
    }
}
