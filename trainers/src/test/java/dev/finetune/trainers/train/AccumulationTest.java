package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class AccumulationTest {

    private record Outcome(Map<String, Object> line, List<float[]> weights) {}

    private static Outcome oneStep(List<SftBatch> data, int accumulation, Path dir) {
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 11, 8, 2, 0.0, true, 5);
            TestRuns options = TestRuns.in(dir).accumulation(accumulation)
                    .maxSteps(1).learningRate(0.05).scheduler(LrScheduler.CONSTANT).maxGradNorm(0)
                    .weightDecay(0.1);
            List<Map<String, Object>> lines = new ArrayList<>();
            new Trainer<>(model, new SftObjective(), data, List.of(), options.build(data.size()), manager, new Trainer.Listener() {
                @Override
                public void afterStep(long step, Map<String, Object> metrics) {
                    lines.add(metrics);
                }
            }).run();
            List<float[]> weights = new ArrayList<>();
            for (NamedArray param : model.trainable()) {
                weights.add(param.array().toFloatArray());
            }
            return new Outcome(lines.get(0), weights);
        }
    }

    @Test
    void kMicroBatchesEqualOneBatchKTimesAsLargeWhatevertheirPadding(@TempDir Path dir) {
        // different widths and target counts per micro batch: a per-micro-batch mean would weight them wrongly
        List<SftBatch> micro = List.of(
                ToyData.batches(1, 2, 6, 11, 1).get(0),
                ToyData.batches(1, 3, 10, 11, 2).get(0),
                ToyData.batches(1, 1, 4, 11, 3).get(0));
        assertNotEquals(micro.get(0).lossWeight(), micro.get(1).lossWeight());
        Outcome accumulated = oneStep(micro, 3, dir.resolve("accumulated"));
        Outcome whole = oneStep(List.of(ToyData.stack(micro)), 1, dir.resolve("whole"));

        double loss = (double) whole.line().get("loss");
        assertEquals(loss, (double) accumulated.line().get("loss"), 1e-5 * loss);
        double norm = (double) whole.line().get("grad_norm");
        assertTrue(norm > 1e-3);
        assertEquals(norm, (double) accumulated.line().get("grad_norm"), 1e-5 * norm);
        for (int p = 0; p < whole.weights().size(); p++) {
            for (int i = 0; i < whole.weights().get(p).length; i++) {
                assertEquals(whole.weights().get(p)[i], accumulated.weights().get(p)[i], 1e-5);
            }
        }
        assertEquals(micro.stream().mapToLong(SftBatch::tokenCount).sum(), ToyData.stack(micro).tokenCount());
    }
}
