package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.ValidatedRecipe;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code optimizer: sgd} is the HF Trainer's: {@code torch.optim.SGD} without momentum, no state, on both trainers.
 * Until #21 the worker ran AdamW in its place and the plan counted a momentum buffer. Here the same LoRA recipe trains
 * with SGD on the JVM trainer and on the worker on 1 and 2 CPU ranks (one global batch split two ways): equal losses;
 * with AdamW it gives another loss sequence (SGD is not replaced); each SGD rank holds exactly the plan's tensor terms,
 * no optimizer state.
 */
class FsdpSgdTest {

    @Test
    void sgdRunsAsSgdOnOneAndTwoRanksWithTheStateThePlanCounts(@TempDir Path dir) throws Exception {
        WorkerEnvironment.python();
        StoriesRecipe recipe = StoriesRecipe.sft().lora().set("max_steps", 6).set("learning_rate", "5e-2")
                .set("weight_decay", "0.01").set("max_grad_norm", "1.0");
        ValidatedRecipe sgdJvm = recipe.set("optimizer", "sgd").set("backend", "single").load(dir, "sgd-jvm");
        ValidatedRecipe sgdOne = recipe.set("backend", "fsdp").load(dir, "sgd-1");
        // the same global batch split over two ranks (2 x micro x 1 instead of 1 x micro x 2)
        ValidatedRecipe sgdTwo = recipe.load(dir, "sgd-2", "gradient_accumulation_steps=1");
        ValidatedRecipe adamw = recipe.set("optimizer", "adamw_torch").set("learning_rate", "5e-2").load(dir, "adamw");
        assertEquals(Optimizer.SGD, sgdOne.recipe().training().optimizer());
        CompletableFuture<?> jvm = FsdpRuns.start(() -> FsdpRuns.jvm(sgdJvm));
        CompletableFuture<?> one = FsdpRuns.start(() -> FsdpRuns.planned(sgdOne, 1));
        CompletableFuture<?> two = FsdpRuns.start(() -> FsdpRuns.planned(sgdTwo, 2));
        FsdpRuns.joinAll(jvm, one, two);
        FsdpRuns.fsdp(adamw, 1);
        Map<Long, Double> lossJvm = FsdpRuns.series(FsdpRuns.outputDir(sgdJvm), "loss");
        Map<Long, Double> lossOne = FsdpRuns.series(FsdpRuns.outputDir(sgdOne), "loss");
        Map<Long, Double> lossTwo = FsdpRuns.series(FsdpRuns.outputDir(sgdTwo), "loss");
        Map<Long, Double> lossAdamW = FsdpRuns.series(FsdpRuns.outputDir(adamw), "loss");
        double ranks = FsdpRuns.maxDelta(lossOne, lossTwo, 0);
        double trainers = Math.max(FsdpRuns.maxDelta(lossJvm, lossOne, 0), FsdpRuns.maxDelta(lossJvm, lossTwo, 0));
        // step 1's loss is the same model's; the updates differ from there on
        double optimizers = FsdpRuns.maxDelta(lossOne, lossAdamW, 2);
        System.out.printf(Locale.ROOT, "sgd: max |d loss| JVM vs worker %.2e, ws1 vs ws2 %.2e; SGD vs AdamW from step 2 "
                + "%.2e%n", trainers, ranks, optimizers);
        assertTrue(trainers <= 1e-4, "SGD on the JVM and on the worker: max |d loss| " + trainers);
        assertTrue(ranks <= 1e-4, "SGD on 1 and 2 ranks: max |d loss| " + ranks);
        assertEquals(6, lossJvm.size(), lossJvm.toString());
        assertTrue(optimizers > 1e-3, "SGD's losses equal AdamW's (max |d| " + optimizers + "): SGD was not run");
        FsdpRuns.tensorsMatchPlan("LoRA SGD", sgdOne, 1);
        FsdpRuns.tensorsMatchPlan("LoRA SGD", sgdTwo, 2);
    }
}
