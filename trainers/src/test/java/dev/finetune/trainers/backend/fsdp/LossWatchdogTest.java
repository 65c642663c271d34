package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code loss_watchdog_threshold} / {@code loss_watchdog_patience} (Axolotl's loss watchdog): a run whose logged loss
 * stays above the threshold for that many steps stops there, on the JVM trainer and on the worker alike; one that
 * stays below runs all its steps.
 */
class LossWatchdogTest {
    static final String YAML = """
            base_model: %s
            datasets:
              - path: %s
                type: completion
            output_dir: %s
            sequence_len: 128
            sample_packing: true
            micro_batch_size: 2
            gradient_accumulation_steps: 1
            max_steps: 8
            learning_rate: 1e-3
            save_steps: 4
            seed: 7
            hardware: cpu
            """;

    @Test
    void aLossAboveTheThresholdStopsBothTrainersAfterThePatience(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        Path data = WorkerEnvironment.data("quickstart.jsonl");
        // the logged loss on this data stays above 0.5 for the first steps (0.68 at step 3), far below 100 throughout
        String watched = "loss_watchdog_threshold=0.5";
        Path jvm = FsdpRuns.jvm(FsdpRuns.recipe(tmp, "jvm", YAML.formatted(WorkerEnvironment.stories260K(), data,
                tmp.resolve("jvm")), watched, "loss_watchdog_patience=3"));
        assertEquals(List.of(1L, 2L, 3L), List.copyOf(FsdpRuns.series(jvm, "loss").keySet()));
        Path worker = tmp.resolve("worker");
        FsdpRuns.fsdp(FsdpRuns.recipe(tmp, "worker", YAML.formatted(WorkerEnvironment.stories260K(), data, worker),
                watched, "loss_watchdog_patience=3"), 1);
        assertEquals(List.of(1L, 2L, 3L), List.copyOf(FsdpRuns.series(worker, "loss").keySet()));
        Path calm = FsdpRuns.jvm(FsdpRuns.recipe(tmp, "calm", YAML.formatted(WorkerEnvironment.stories260K(), data,
                tmp.resolve("calm")), "loss_watchdog_threshold=100"));
        assertEquals(8, FsdpRuns.series(calm, "loss").size());
    }
}
