package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonParser;
import dev.finetune.recipes.ValidatedRecipe;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code overrides_of_model_config} is carried out by both trainers alike: a full fine-tune of stories260K with
 * {@code rope_theta} overridden trains a different model than without (its loss sequence moves), the JVM trainer and
 * the worker (world size 1) train the same one (their losses agree to 1e-4), and each saves the config.json it trained.
 */
class ConfigOverridesTrainingTest {

    @Test
    void bothTrainersTrainTheOverriddenModel(@TempDir Path tmp) throws Exception {
        WorkerEnvironment.python();
        StoriesRecipe recipe = StoriesRecipe.sft().set("max_steps", 4).set("learning_rate", "3e-3")
                .set("save_steps", 4).set("val_set_size", 0);
        ValidatedRecipe plain = recipe.load(tmp, "plain", "backend=single");
        recipe.set("overrides_of_model_config", "{rope_theta: 100.0}");
        ValidatedRecipe jvm = recipe.load(tmp, "jvm", "backend=single");
        ValidatedRecipe worker = recipe.load(tmp, "worker", "backend=fsdp");
        // the worker beside the JVM trainer; the engine trains one model at a time in this process
        CompletableFuture<FsdpBackend.Result> workerRun = FsdpRuns.start(() -> FsdpRuns.fsdp(worker, 1));
        CompletableFuture<Path> jvmRuns = FsdpRuns.start(() -> {
            FsdpRuns.jvm(plain);
            return FsdpRuns.jvm(jvm);
        });
        FsdpRuns.joinAll(jvmRuns, workerRun);

        Map<Long, Double> plainLoss = FsdpRuns.series(tmp.resolve("plain"), "loss");
        Map<Long, Double> jvmLoss = FsdpRuns.series(tmp.resolve("jvm"), "loss");
        Map<Long, Double> workerLoss = FsdpRuns.series(tmp.resolve("worker"), "loss");
        double apart = FsdpRuns.maxDelta(plainLoss, jvmLoss, 0);
        double agree = FsdpRuns.maxDelta(jvmLoss, workerLoss, 0);
        System.out.printf(Locale.ROOT, "rope_theta 100 vs the file's 10000: losses %s vs %s (max |d| %.3e); JVM vs "
                + "worker with the override: max |d loss| %.2e%n", plainLoss, jvmLoss, apart, agree);
        assertEquals(4, workerLoss.size());
        assertTrue(apart > 1e-3, "the override changed nothing: " + apart);
        assertTrue(agree <= 1e-4, "the trainers trained different models: " + agree);
        for (String run : new String[] {"jvm", "worker"}) {
            var saved = JsonParser.parseString(Files.readString(tmp.resolve(run).resolve("config.json")))
                    .getAsJsonObject();
            assertEquals(100.0, saved.get("rope_theta").getAsDouble(), run + "'s config.json");
        }
        var base = JsonParser.parseString(Files.readString(WorkerEnvironment.stories260K()
                .resolve("config.json"))).getAsJsonObject();
        assertEquals(10000.0, base.get("rope_theta").getAsDouble(), "the base model's folder is left alone");
    }
}
