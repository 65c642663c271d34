package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.ValidatedRecipe;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The precision regimes the worker runs on CPU ranks besides fp32 (which FsdpEquivalenceTest holds to the JVM
 * trainer, which has no other): each stores every kind of state in exactly the dtype the plan counts (the ranks'
 * tensor bytes equal the plan's terms on 1 and 2 ranks), and one global batch split over 1 or 2 ranks gives the same
 * losses up to bfloat16's rounding of sums taken in another order.
 */
class FsdpPrecisionTest {
    /**
     * bf16 keeps 8 bits of mantissa: gradients summed in another order (one rank's accumulation, or two ranks'
     * reduce-scatter) round differently. Measured: bf16 and bf16-fp32-moments 0, mixed 2.5e-3 by step 4 (its fp32
     * adapters see the bf16 base's activations through another sum order).
     */
    private static final double BF16_TOLERANCE = 1e-2;

    @ParameterizedTest
    @ValueSource(strings = {"bf16", "mixed", "bf16-fp32-moments"})
    void aRegimeHoldsItsPlanAndItsLossesOnOneAndTwoRanks(String regime, @TempDir Path dir) throws Exception {
        WorkerEnvironment.python();
        StoriesRecipe recipe = StoriesRecipe.sft().set("max_steps", 4).set("learning_rate", "3e-3")
                .set("backend", "fsdp").set("bf16", true).set("precision", regime);
        // mixed is LoRA's regime (fp32 adapters over a bf16 base); the others are a full fine-tune's
        if (regime.equals("mixed")) {
            recipe.lora();
        }
        ValidatedRecipe one = recipe.load(dir, "one");
        ValidatedRecipe two = recipe.load(dir, "two", "gradient_accumulation_steps=1");
        CompletableFuture<?> oneRun = FsdpRuns.start(() -> FsdpRuns.planned(one, 1));
        CompletableFuture<?> twoRun = FsdpRuns.start(() -> FsdpRuns.planned(two, 2));
        FsdpRuns.joinAll(oneRun, twoRun);
        Map<Long, Double> lossOne = FsdpRuns.series(FsdpRuns.outputDir(one), "loss");
        Map<Long, Double> lossTwo = FsdpRuns.series(FsdpRuns.outputDir(two), "loss");
        double delta = FsdpRuns.maxDelta(lossOne, lossTwo, 0);
        System.out.printf(Locale.ROOT, "precision %s: max |d loss| ws1 vs ws2 %.2e (%s vs %s)%n", regime, delta,
                lossOne.values(), lossTwo.values());
        assertTrue(delta <= BF16_TOLERANCE, regime + ": ws1 vs ws2 max |d loss| " + delta);
        FsdpRuns.tensorsMatchPlan(regime, one, 1);
        FsdpRuns.tensorsMatchPlan(regime, two, 2);
    }
}
