package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import com.google.gson.JsonObject;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.BestModel;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.output.MetricsLog;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * The best evaluation so far of {@code metric_for_best_model}, its checkpoint, and the evaluations since it (the HF
 * Trainer's {@code best_metric}, {@code best_model_checkpoint} and early-stopping counter). After a resume all three
 * are read back from {@code metrics.jsonl}, so they continue as if the run had never stopped.
 */
final class BestCheckpoint {
    private static final Logger LOG = LogManager.getLogger(BestCheckpoint.class);

    private final BestModel settings;
    private final CheckpointStore checkpoints;
    private double value = Double.NaN;
    private long step = -1;
    private Path folder;
    private int sinceBest;

    private BestCheckpoint(BestModel settings, CheckpointStore checkpoints) {
        this.settings = settings;
        this.checkpoints = checkpoints;
    }

    /** The state after the evaluations of {@code metricsFile} up to {@code step} (none on a fresh run). */
    static BestCheckpoint replay(BestModel settings, Path metricsFile, long step, CheckpointStore checkpoints) {
        BestCheckpoint best = new BestCheckpoint(settings, checkpoints);
        if (step == 0 || !Files.isRegularFile(metricsFile)) {
            return best;
        }
        for (JsonObject line : MetricsLog.read(metricsFile)) {
            long at = line.has("step") ? line.get("step").getAsLong() : 0;
            if (at > 0 && at <= step && line.has(settings.lineKey())) {
                best.update(at, line.get(settings.lineKey()).getAsDouble());
            }
        }
        Path saved = metricsFile.resolveSibling("checkpoint-" + best.step);
        if (best.step > 0 && Files.isDirectory(saved)) {
            best.saved(best.step, saved);
        }
        return best;
    }

    /** An evaluation after training step {@code at}; true when it is the best so far. */
    boolean observe(long at, Map<String, Object> line) {
        if (!(line.get(settings.lineKey()) instanceof Number metric)) {
            throw new UserError("metric_for_best_model", "the evaluation wrote no " + settings.lineKey(),
                    "use one of the metrics in metrics.jsonl's eval_ entries");
        }
        return update(at, metric.doubleValue());
    }

    private boolean update(long at, double metric) {
        if (settings.improves(metric, value)) {
            value = metric;
            step = at;
            folder = null;
            sinceBest = 0;
            return true;
        }
        sinceBest++;
        return false;
    }

    /** {@code early_stopping_patience} evaluations in a row did not improve on the best. */
    boolean patienceSpent() {
        return settings.patience() != null && sinceBest >= settings.patience();
    }

    /** A checkpoint was written at {@code at}: the best one stays whatever {@code save_total_limit} says. */
    void saved(long at, Path saved) {
        if (at == step) {
            folder = saved;
            checkpoints.keep(saved);
        }
    }

    double value() {
        return value;
    }

    long step() {
        return step;
    }

    /** {@code load_best_model_at_end}: the best checkpoint's weights into {@code params}, unless they are already. */
    void loadInto(List<NamedArray> params, long finalStep, NDManager manager) {
        if (step < 0 || step == finalStep) {
            return;
        }
        if (folder == null) {
            LOG.warn("warning: the best {} ({} at step {}) has no checkpoint; the run ends with the last weights",
                    settings.lineKey(), value, step);
            return;
        }
        try (NDManager loading = manager.newSubManager()) {
            Map<String, NDArray> weights = CheckpointStore.load(folder, loading).weights();
            for (NamedArray param : params) {
                param.array().set(weights.get(param.name()).toByteBuffer());
            }
        }
        LOG.info("loaded the best checkpoint {} ({} {}) as the run's result (load_best_model_at_end)",
                folder.getFileName(), settings.lineKey(), value);
    }
}
