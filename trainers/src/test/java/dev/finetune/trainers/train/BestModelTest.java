package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import com.google.gson.JsonObject;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.BestModel;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.output.MetricsLog;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code early_stopping_patience}, {@code load_best_model_at_end} and {@code save_strategy: best} on a toy model
 * whose held-out loss first falls, then rises (it learns one set of random rows and is evaluated on another).
 */
class BestModelTest {
    static final List<SftBatch> TRAIN = ToyData.batches(4, 2, 6, 11, 3);
    static final List<SftBatch> EVAL = ToyData.batches(2, 2, 6, 11, 99);

    /** The eval losses of a run with {@code options}, and the trained weights at its end. */
    record Outcome(List<Double> evalLosses, List<Long> evalSteps, Map<String, float[]> weights, long steps) {}

    static Outcome run(Path dir, TestRuns options) {
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 11, 8, 2, 0.0, true, 5);
            Trainer.Summary summary = new Trainer<>(model, new SftObjective(), TRAIN, EVAL, options.build(TRAIN.size()),
                    manager, new Trainer.Listener() {}).run();
            Map<String, float[]> weights = new java.util.TreeMap<>();
            for (NamedArray p : model.trainable()) {
                weights.put(p.name(), p.array().toFloatArray());
            }
            List<JsonObject> evals = MetricsLog.read(dir.resolve(MetricsLog.FILE)).stream()
                    .filter(l -> l.has("eval_loss") && l.get("step").getAsLong() > 0).toList();
            return new Outcome(evals.stream().map(l -> l.get("eval_loss").getAsDouble()).toList(),
                    evals.stream().map(l -> l.get("step").getAsLong()).toList(), weights, summary.steps());
        }
    }

    static TestRuns options(Path dir) {
        return TestRuns.in(dir).maxSteps(30).learningRate(0.1).scheduler(LrScheduler.CONSTANT).evalEvery(1).saveEvery(1)
                .saveTotalLimit(2);
    }

    static int argmin(List<Double> values) {
        int best = 0;
        for (int i = 1; i < values.size(); i++) {
            best = values.get(i) < values.get(best) ? i : best;
        }
        return best;
    }

    @Test
    void earlyStoppingEndsTheRunWithTheBestCheckpoint(@TempDir Path dir) throws Exception {
        Outcome all = run(dir.resolve("all"), options(dir.resolve("all")));
        assertEquals(30, all.steps());
        int best = argmin(all.evalLosses());
        assertTrue(best < all.evalLosses().size() - 2, "the held-out loss must rise again: " + all.evalLosses());

        Path out = dir.resolve("patience");
        Outcome stopped = run(out, options(out).best(new BestModel("loss", false, 2, true)));
        // the same steps until the held-out loss has failed to improve twice in a row
        int bestOfStopped = argmin(stopped.evalLosses());
        List<Double> after = stopped.evalLosses().subList(bestOfStopped + 1, stopped.evalLosses().size());
        assertTrue(stopped.steps() < 30, "stopped at step " + stopped.steps() + " of 30: " + stopped.evalLosses());
        assertEquals(2, after.size(), "two evaluations without improvement, then the stop: " + stopped.evalLosses());
        assertEquals(all.evalLosses().subList(0, stopped.evalLosses().size()), stopped.evalLosses());
        // the result is the best checkpoint's weights, kept although save_total_limit is 2
        long bestStep = stopped.evalSteps().get(bestOfStopped);
        Path checkpoint = out.resolve("checkpoint-" + bestStep);
        assertTrue(Files.isDirectory(checkpoint), "the best checkpoint was kept");
        try (NDManager manager = NDManager.newBaseManager()) {
            var saved = CheckpointStore.load(checkpoint, manager).weights();
            for (var e : stopped.weights().entrySet()) {
                assertArrayEquals(saved.get(e.getKey()).toFloatArray(), e.getValue(), e.getKey());
            }
        }
    }

    @Test
    void saveStrategyBestSavesOnlyImprovements(@TempDir Path dir) throws Exception {
        Outcome run = run(dir, options(dir).saveTotalLimit(0).best(new BestModel("loss", false, null, false)).saveBest(true));
        List<Long> saved;
        try (var files = Files.list(dir)) {
            saved = files.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("checkpoint-"))
                    .map(n -> Long.parseLong(n.substring("checkpoint-".length()))).sorted().toList();
        }
        List<Long> improvements = new java.util.ArrayList<>();
        double best = Double.NaN;
        for (int i = 0; i < run.evalLosses().size(); i++) {
            if (Double.isNaN(best) || run.evalLosses().get(i) < best) {
                best = run.evalLosses().get(i);
                improvements.add(run.evalSteps().get(i));
            }
        }
        assertEquals(improvements, saved);
        assertTrue(saved.size() < 30, "not every step improved: " + run.evalLosses());
    }
}
