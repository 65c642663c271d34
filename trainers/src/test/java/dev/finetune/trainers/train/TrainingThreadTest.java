package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * libtorch's grad mode is per thread and a new thread starts with it on: a run on a fresh thread (as a CLI
 * worker would start it) must behave exactly like one on the engine's first thread, and evaluation and the
 * optimizer must not run with it on.
 */
class TrainingThreadTest {

    private static List<Object> losses(Path dir, AtomicBoolean gradModeSeenBetweenSteps) {
        List<Object> losses = new ArrayList<>();
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 11, 8, 2, 0.1, true, 9);
            List<SftBatch> data = ToyData.batches(4, 2, 8, 11, 6);
            TestRuns options = TestRuns.in(dir).accumulation(2).maxSteps(4)
                    .learningRate(1e-2).scheduler(LrScheduler.LINEAR).evalEvery(2);
            new Trainer<>(model, new SftObjective(), data.subList(0, 3), data.subList(3, 4), options.build(3), manager,
                    new Trainer.Listener() {
                        @Override
                        public void afterStep(long step, Map<String, Object> metrics) {
                            losses.add(metrics.getOrDefault("loss", metrics.get("eval_loss")));
                            gradModeSeenBetweenSteps.compareAndSet(false, JniUtils.isGradMode());
                        }
                    }).run();
        }
        return losses;
    }

    @Test
    void aRunOnAFreshThreadEqualsOneOnTheEngineThread(@TempDir Path dir) throws Exception {
        AtomicBoolean onMain = new AtomicBoolean();
        List<Object> here = losses(dir.resolve("here"), onMain);
        AtomicBoolean onWorker = new AtomicBoolean();
        List<List<Object>> there = new ArrayList<>();
        Thread worker = new Thread(() -> there.add(losses(dir.resolve("there"), onWorker)));
        worker.start();
        worker.join();
        assertEquals(here, there.get(0));
        assertFalse(onMain.get());
        assertFalse(onWorker.get(), "grad mode was left on between steps on a fresh thread");
    }
}
