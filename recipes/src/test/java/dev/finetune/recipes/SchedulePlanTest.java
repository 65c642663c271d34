package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The HF Trainer's and Axolotl's resolution of steps, warm-up and intervals, worked out by hand. */
class SchedulePlanTest {

    private static Recipe recipe(Integer maxSteps, Integer warmupSteps, Double warmupRatio, EvalStrategy evalStrategy,
            Double evalSteps, Double saveSteps, Integer savesPerEpoch, int loraRank) {
        Recipe.Model model = new Recipe.Model("configs/models/stories260K", null, null, false, Map.of(), null, null,
                List.of(), Map.of(), null, null, Map.of());
        AdapterSpec adapter = new AdapterSpec.Lora(loraRank, 16, 0.05, List.of("q_proj", "v_proj"), false, false, null);
        Recipe.Data data = new Recipe.Data(List.of(), List.of(), 0.1, null, false, Recipe.ExcessLength.DROP, false, DataSelection.DEFAULTS);
        Recipe.Training training = new Recipe.Training(256, true, true, 256, false, 3, maxSteps, 2e-4, LrScheduler.COSINE,
                0.1, 0, false, warmupSteps, warmupRatio, Optimizer.ADAMW_TORCH, 0.01, 0.9, 0.95, 1e-8, 0.5, true, 17, true, null, 3);
        Recipe.Output output = new Recipe.Output("out", new Resume.Fresh(), null, null, saveSteps, savesPerEpoch, 3,
                evalStrategy, evalSteps, null, null, null, false, false);
        return new Recipe(model, adapter, data, training, new Recipe.Batch(2, 4, null, null),
                new Recipe.Precision(Recipe.Flag.FALSE, Recipe.Flag.FALSE, Recipe.Flag.FALSE), new Recipe.Objective.Sft(),
                new Recipe.Distributed(null, 1, 1, 1800), new Recipe.Hardware.Cpu(), Recipe.Backend.SINGLE, output,
                Recipe.Speedups.NONE);
    }

    @Test
    void epochsAccumulationAndFractionsResolveAsTheHfTrainerDoes() {
        // 40 micro batches, accumulation 4: 10 steps per epoch, 3 epochs: 30 steps
        SchedulePlan plan = SchedulePlan.of(recipe(null, null, null, null, 0.25, null, 2, 8), 4, 40, false);
        assertEquals(10, plan.stepsPerEpoch());
        assertEquals(30, plan.totalSteps());
        assertEquals(0, plan.warmupSteps(), "min(0.03 x 30, 100) rounded down");
        assertEquals(8, plan.evalEvery(), "ceil(0.25 x 30)");
        assertEquals(5, plan.saveEvery(), "10 steps per epoch, 2 saves per epoch");
        assertEquals(1, plan.logEvery());
    }

    @Test
    void fractionalEpochsRoundTheStepsUpOverTheWholeRun() {
        // 10 micro batches, accumulation 4, 3 epochs: ceil(30 / 4) = 8, not 3 x ceil(10 / 4) = 9
        assertEquals(8, SchedulePlan.of(recipe(null, null, null, null, null, null, null, 8), 4, 10, false).totalSteps());
    }

    @Test
    void warmupStepsWinOverTheRatioWhichRoundsUp() {
        assertEquals(30, SchedulePlan.of(recipe(null, null, 0.1, null, null, null, null, 8), 1, 100, false).warmupSteps(),
                "ceil(0.1 x 300)");
        assertEquals(3, SchedulePlan.of(recipe(null, 3, null, null, null, null, null, 8), 1, 100, false).warmupSteps());
        assertEquals(9, SchedulePlan.of(recipe(null, null, null, null, null, null, null, 8), 1, 100, false).warmupSteps(),
                "Axolotl's default: 3 % of 300");
        assertEquals(100, SchedulePlan.of(recipe(null, null, null, null, null, null, null, 8), 1, 10_000, false)
                .warmupSteps(), "at most 100");
    }

    @Test
    void maxStepsWinsAndStrategiesSwitchIntervals() {
        SchedulePlan plan = SchedulePlan.of(recipe(7, null, null, EvalStrategy.NO, null, null, null, 8), 1, 100, false);
        assertEquals(7, plan.totalSteps());
        assertEquals(0, plan.evalEvery(), "eval_strategy: no");
        assertEquals(100, plan.saveEvery(), "nothing said: once per epoch");
        assertEquals(100, SchedulePlan.of(recipe(null, null, null, EvalStrategy.EPOCH, null, null, null, 8), 1, 100, false)
                .evalEvery());
        assertEquals(20, SchedulePlan.of(recipe(null, null, null, null, null, 20.0, null, 8), 1, 100, false).saveEvery());
    }

    @Test
    void aChangedAdapterRankChangesTheResumeInvariants() {
        Map<String, String> rank8 = ResumeInvariants.of(recipe(null, 5, null, null, null, null, null, 8), "d", "m");
        Map<String, String> rank16 = ResumeInvariants.of(recipe(null, 5, null, null, null, null, null, 16), "d", "m");
        assertEquals("8", rank8.get("lora_r"));
        assertNotEquals(rank8.get("lora_r"), rank16.get("lora_r"));
        assertEquals(rank8.get("adapter"), rank16.get("adapter"));
        assertEquals("256", rank8.get("sequence_len"));
        assertEquals("d", rank8.get("datasets"));
        assertEquals("sft", rank8.get("rl"));
    }
}
