package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.train.TensorBoardLogTest;
import dev.finetune.trainers.train.output.TrainResults;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code logging_steps} and {@code use_tensorboard} on the fsdp backend: the worker reports every step, and the
 * launcher folds them into the same logged lines, with the same interval means, as the JVM trainer writes; and it
 * writes the same run summary ({@code train_results.json}); the first step's memory, measured and planned, lands in
 * the first logged line.
 */
class FsdpLoggingTest {

    @Test
    void theWorkersStepsAreLoggedEveryLoggingStepsAsOnTheJvm(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        StoriesRecipe recipe = StoriesRecipe.sft().set("max_steps", 7).set("learning_rate", "1e-3").set("eval_steps", 5)
                .set("save_steps", 7).set("logging_steps", 3).set("use_tensorboard", true);
        Path jvm = FsdpRuns.jvm(recipe.load(tmp, "jvm"));
        // two ranks, one micro batch each per step: the JVM run's global batch of 2 x 2
        Path worker = tmp.resolve("two");
        ValidatedRecipe two = recipe.load(tmp, "two", "gradient_accumulation_steps=1");
        FsdpRuns.planned(two, 2);
        Map<Long, Double> workerLoss = FsdpRuns.series(worker, "loss");
        assertEquals(List.of(3L, 5L, 6L, 7L), List.copyOf(workerLoss.keySet()),
                "every third step, the evaluated step 5 and the last");
        // step 1's memory, measured and planned, is not folded away with step 1's line
        FsdpRuns.tensorsMatchPlan("logging_steps 3", two, 2);
        double delta = FsdpRuns.maxDelta(FsdpRuns.series(jvm, "loss"), workerLoss, 0);
        System.out.printf("logging_steps 3: max |interval mean loss, JVM - worker| %.2e%n", delta);
        assertTrue(delta <= 1e-4, "the interval means agree as the per-step losses do: " + delta);
        for (Path run : List.of(jvm, worker)) {
            try (Stream<Path> files = Files.walk(run.resolve("runs"))) {
                Path events = files.filter(f -> f.getFileName().toString().startsWith("events.out.tfevents."))
                        .findFirst().orElseThrow();
                List<TensorBoardLogTest.Event> read = TensorBoardLogTest.read(events);
                assertTrue(read.stream().anyMatch(e -> e.step() == 6 && e.scalars().containsKey("train/loss")),
                        run + ": step 6's loss in " + events);
                assertTrue(read.stream().anyMatch(e -> e.step() == 7
                        && e.scalars().containsKey("train/train_runtime")), run + ": the run summary in " + events);
            }
        }

        // the run summary, train_results.json, as HF's trainer.save_metrics("train", ...) writes it
        JsonObject jvmResults = results(jvm);
        JsonObject workerResults = results(worker);
        assertEquals(jvmResults.keySet(), workerResults.keySet());
        for (String key : List.of("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss",
                "total_flos", "epoch")) {
            assertTrue(workerResults.has(key), key + " in " + workerResults);
        }
        double trainLoss = Math.abs(jvmResults.get("train_loss").getAsDouble()
                - workerResults.get("train_loss").getAsDouble());
        System.out.printf("train_results.json: JVM %s%n  worker ws2 %s%n  |train_loss, JVM - ws2| %.2e%n", jvmResults,
                workerResults, trainLoss);
        assertTrue(trainLoss <= 1e-4, "the mean of the same per-step losses: " + trainLoss);
        // the same tokens and the same parameter count (embeddings excepted, adapters included) on both sides
        assertEquals(jvmResults.get("total_flos").getAsDouble(), workerResults.get("total_flos").getAsDouble());
        assertEquals(jvmResults.get("num_tokens").getAsLong(), workerResults.get("num_tokens").getAsLong());
        assertEquals(7, workerResults.get("step").getAsLong());
        assertEquals(jvmResults.get("epoch").getAsDouble(), workerResults.get("epoch").getAsDouble(), 1e-12);
        // samples per second over the global batch: the same samples, so the ratio of the rates is that of the times
        double jvmSamples = jvmResults.get("train_samples_per_second").getAsDouble()
                * jvmResults.get("train_runtime").getAsDouble();
        double workerSamples = workerResults.get("train_samples_per_second").getAsDouble()
                * workerResults.get("train_runtime").getAsDouble();
        assertEquals(jvmSamples, workerSamples, 1e-6 * jvmSamples);
        assertEquals(7.0, workerResults.get("train_steps_per_second").getAsDouble()
                * workerResults.get("train_runtime").getAsDouble(), 1e-9);
    }

    private static JsonObject results(Path run) throws IOException {
        return JsonParser.parseString(Files.readString(run.resolve(TrainResults.FILE))).getAsJsonObject();
    }
}
