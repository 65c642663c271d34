package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.trainers.train.TensorBoardLogTest;
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
 * launcher folds them into the same logged lines, with the same interval means, as the JVM trainer writes.
 */
class FsdpLoggingTest {

    @Test
    void theWorkersStepsAreLoggedEveryLoggingStepsAsOnTheJvm(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        String yaml = """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                val_set_size: 0.05
                output_dir: %s
                sequence_len: 128
                sample_packing: true
                micro_batch_size: 2
                gradient_accumulation_steps: 2
                max_steps: 7
                learning_rate: 1e-3
                lr_scheduler: cosine
                warmup_steps: 2
                eval_steps: 5
                save_steps: 7
                logging_steps: 3
                use_tensorboard: true
                seed: 7
                hardware: cpu
                """;
        Path data = WorkerEnvironment.data("quickstart.jsonl");
        Path jvm = FsdpRuns.jvm(FsdpRuns.recipe(tmp, "jvm",
                yaml.formatted(WorkerEnvironment.stories260K(), data, tmp.resolve("jvm"))));
        Path worker = tmp.resolve("one");
        FsdpRuns.fsdp(FsdpRuns.recipe(tmp, "one", yaml.formatted(WorkerEnvironment.stories260K(), data, worker)), 1);
        Map<Long, Double> workerLoss = FsdpRuns.series(worker, "loss");
        assertEquals(List.of(3L, 5L, 6L, 7L), List.copyOf(workerLoss.keySet()),
                "every third step, the evaluated step 5 and the last");
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
            }
        }
    }
}
