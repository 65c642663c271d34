package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.BaseNDManager;
import ai.djl.ndarray.NDManager;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Nothing created by a step may outlive it: the long-lived manager must hold the same number of arrays after
 * step 5 as after step 60, with checkpointing, accumulation, evaluation and checkpoint saves in between. (A leak
 * of one array per step is how resident memory grows; RSS itself is measured by the benchmark harness.)
 */
class ResidentMemoryTest {

    @Test
    void theLongLivedManagerHoldsAConstantNumberOfArrays(@TempDir Path dir) {
        List<Integer> counts = new ArrayList<>();
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 11, 8, 2, 0.1, true, 3);
            List<SftBatch> data = ToyData.batches(6, 2, 8, 11, 4);
            TestRuns options = TestRuns.in(dir).accumulation(2).maxSteps(60)
                    .learningRate(1e-2).scheduler(LrScheduler.LINEAR).checkpointing(true).evalEvery(10)
                    .saveEvery(20).saveTotalLimit(1);
            new Trainer<>(model, new SftObjective(), data.subList(0, 5), data.subList(5, 6), options.build(5), manager,
                    new Trainer.Listener() {
                        @Override
                        public void afterStep(long step, Map<String, Object> metrics) {
                            if (step == 5 || step == 60) {
                                counts.add(((BaseNDManager) manager).getManagedArrays().size());
                            }
                        }
                    }).run();
        }
        assertEquals(2, counts.size());
        assertEquals(counts.get(0), counts.get(1), "arrays held after step 5 vs step 60");
    }
}
