package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.recipes.Resume;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.optim.LrSchedule;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class RecipeOptionsTest {

    private static Recipe recipe(LrScheduler scheduler, Integer warmupSteps, Double warmupRatio, Double evalSteps,
            Integer savesPerEpoch, Resume resume, int loraRank, Recipe.Optimizer optimizer) {
        Recipe.Model model = new Recipe.Model("configs/models/stories260K", null, null, false, Map.of(), null, null,
                List.of());
        AdapterSpec adapter = new AdapterSpec.Lora(loraRank, 16, 0.05, List.of("q_proj", "v_proj"), false, false, null);
        Recipe.Data data = new Recipe.Data(List.of(), List.of(), 0.1, null, false, Recipe.ExcessLength.DROP, false);
        Recipe.Training training = new Recipe.Training(256, true, true, false, 3, null, 2e-4, scheduler, 0.1,
                warmupSteps, warmupRatio, optimizer, 0.01, 0.9, 0.95, 1e-8, 0.5, true, 17, true);
        Recipe.Batch batch = new Recipe.Batch(2, 4, null, null);
        Recipe.Precision precision = new Recipe.Precision(Recipe.Flag.FALSE, Recipe.Flag.FALSE, Recipe.Flag.FALSE);
        Recipe.Distributed distributed = new Recipe.Distributed(null, 1, 1);
        Recipe.Output output = new Recipe.Output("out", resume == null ? new Resume.Fresh() : resume, null, null, null, savesPerEpoch, 3, null,
                evalSteps, null, null, null, null, false);
        return new Recipe(model, adapter, data, training, batch, precision, new Recipe.Objective.Sft(), distributed,
                new Recipe.Hardware.Cpu(), Recipe.Backend.SINGLE, output);
    }

    @Test
    void recipeKeysBecomeLoopOptionsWithAxolotlResolution() {
        // 40 micro batches, accumulation 4: 10 steps per epoch, 3 epochs: 30 steps
        TrainingOptions options = RecipeOptions.from(
                recipe(LrScheduler.COSINE, null, null, 0.25, 2, new Resume.Newest(), 8, Recipe.Optimizer.ADAMW_TORCH), 4, 40, "data#1");
        assertEquals(30, Trainer.totalSteps(options, 40));
        assertEquals(LrSchedule.COSINE, options.lrScheduler());
        assertEquals(0.1, options.cosineMinLrRatio());
        assertEquals(0, options.warmupSteps()); // min(0.03 × 30, 100) rounded down
        assertEquals(8, options.evalSteps()); // ceil(0.25 × 30)
        assertEquals(5, options.saveSteps()); // 10 steps per epoch, 2 saves per epoch
        assertEquals(3, options.saveTotalLimit());
        assertEquals(0.95, options.adamBeta2());
        assertEquals(0.5, options.maxGradNorm());
        assertTrue(options.gradientCheckpointing());
        assertEquals(17, options.seed());
        assertEquals(Path.of("out"), options.outputDir());
        assertInstanceOf(TrainingOptions.Resume.Newest.class, options.resumeFromCheckpoint());
        assertEquals("256", options.resumeInvariants().get("sequence_len"));
        assertEquals("data#1", options.resumeInvariants().get("datasets"));
    }

    @Test
    void warmupRatioAndConstantWithWarmupAreUnderstood() {
        TrainingOptions options = RecipeOptions.from(
                recipe(LrScheduler.CONSTANT_WITH_WARMUP, null, 0.1, null, null, null, 8, null), 1, 100, "d");
        assertEquals(LrSchedule.CONSTANT, options.lrScheduler());
        assertEquals(30, options.warmupSteps()); // ceil(0.1 × 3 epochs × 100 steps)
        assertEquals(100, options.saveSteps()); // nothing said: once per epoch
        assertEquals(0, options.evalSteps());
        assertInstanceOf(TrainingOptions.Resume.Fresh.class, options.resumeFromCheckpoint());
    }

    @Test
    void aChangedAdapterRankChangesTheResumeInvariants() {
        Map<String, String> rank8 = RecipeOptions.from(recipe(LrScheduler.COSINE, 5, null, null, null, null, 8, null), 1, 10,
                "d").resumeInvariants();
        Map<String, String> rank16 = RecipeOptions.from(recipe(LrScheduler.COSINE, 5, null, null, null, null, 16, null), 1, 10,
                "d").resumeInvariants();
        assertEquals("8", rank8.get("lora_r"));
        assertNotEquals(rank8.get("lora_r"), rank16.get("lora_r"));
        assertEquals(rank8.get("adapter"), rank16.get("adapter"));
    }

    @Test
    void unsupportedSchedulesAndOptimizersAreUserErrors() {
        UserError optimizer = assertThrows(UserError.class, () -> RecipeOptions.from(
                recipe(LrScheduler.COSINE, null, null, null, null, null, 8, Recipe.Optimizer.ADAMW_BNB_8BIT), 1, 10, "d"));
        assertEquals("optimizer", optimizer.where());
    }
}
