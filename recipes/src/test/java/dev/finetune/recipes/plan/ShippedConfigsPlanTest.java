package dev.finetune.recipes.plan;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.BatchPlan;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.model.ModelSource;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** Every recipe we ship fits the hardware its own {@code hardware:} block names, by our estimate. */
class ShippedConfigsPlanTest {

    static Path configs() {
        for (Path p = Path.of(System.getProperty("user.dir")).toAbsolutePath(); p != null; p = p.getParent()) {
            if (Files.isDirectory(p.resolve("configs/models"))) {
                return p.resolve("configs");
            }
        }
        throw new IllegalStateException("configs/ not found above " + System.getProperty("user.dir"));
    }

    @Test
    void everyShippedRecipeFitsItsOwnHardware() throws IOException {
        List<Path> recipes;
        try (Stream<Path> files = Files.walk(configs())) {
            recipes = files.filter(p -> p.toString().endsWith(".yaml") && !p.toString().contains("/models/")).sorted().toList();
        }
        assertFalse(recipes.isEmpty());
        for (Path file : recipes) {
            ValidatedRecipe v = ValidatedRecipe.load(file, List.of());
            Recipe r = v.recipe();
            ModelSource source = ModelSource.resolve(r.model().baseModel(), r.model().revision(), file.getParent(), null);
            ModelSource.Found found = assertInstanceOf(ModelSource.Found.class, source, file + ": architecture unknown");
            BatchPlan b = v.plan();
            TrainingSetup setup = RecipeSetup.of(r, v.run(), r.model().baseModel(), found.config(), null, b.micro(),
                    b.accumulation(), b.generationBatch());
            if (setup.onCpu()) {
                setup = setup.withSharding(setup.sharding(), LAPTOP);
            }
            MemoryPlan plan = MemoryPlan.of(setup);
            System.out.printf("%-40s peak %6.1f GiB of %6.1f GiB in %s%n", configs().relativize(file),
                    plan.estimate().peakBytes() / Bytes.GIB, plan.estimate().capacityBytes() / Bytes.GIB, plan.estimate().peakPhase().label());
            assertTrue(plan.estimate().fits(), file + "\n" + PlanText.render(plan));
        }
    }

    /** A CPU recipe is planned against a 16 GiB laptop, not this machine. */
    private static final Devices LAPTOP = Devices.cpu(16L << 30);
}
