package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.Resume;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.checkpoint.ResumeKeys;
import dev.finetune.trainers.train.checkpoint.TrainerState;
import dev.finetune.trainers.train.optim.UpdateRule;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Which checkpoint a run continues from, and whether it can: a resume must repeat the uninterrupted run exactly,
 * so a checkpoint written for other recipe values, another seed or another accumulation is refused rather than
 * continued approximately.
 */
public final class ResumePoint {
    private static final Logger LOG = LogManager.getLogger(ResumePoint.class);

    private ResumePoint() {}

    /**
     * Refuses a resume that the {@link Trainer} would refuse, without loading anything: lets a caller check before
     * it writes into {@code output_dir}.
     */
    public static void requireResumable(Trainer.Run run, int microBatchesPerEpoch) {
        Path folder = folder(run, new CheckpointStore(run.outputDir(), run.saveTotalLimit()));
        if (folder != null) {
            requireMatches(CheckpointStore.verify(folder), run, microBatchesPerEpoch, folder);
        }
    }

    /** The recipe values a checkpoint of this run is valid for: its hash names the owner of output_dir too. */
    public static Map<String, String> keys(Trainer.Run run, int microBatchesPerEpoch) {
        Map<String, String> keys = new TreeMap<>(run.resumeInvariants());
        keys.put("micro_batches_per_epoch", Integer.toString(microBatchesPerEpoch));
        return keys;
    }

    /** The checkpoint folder the recipe asks to continue from, or null to start at step 0. */
    static Path folder(Trainer.Run run, CheckpointStore checkpoints) {
        Resume resume = run.resume();
        if (resume instanceof Resume.From from) {
            return checkpoints.resolve("resume_from_checkpoint", from.folder());
        }
        if (resume instanceof Resume.Newest) {
            List<CheckpointStore.Saved> complete = checkpoints.complete();
            if (complete.isEmpty()) {
                LOG.info("resume_from_checkpoint: no checkpoint in {} yet, starting from step 0", run.outputDir());
                return null;
            }
            return newestIntact(complete, run.outputDir());
        }
        return null;
    }

    /** Loads weights and moments in place and returns the saved state; refuses a changed recipe first. */
    static TrainerState restore(Path folder, Trainer.Run run, int microBatchesPerEpoch, List<NamedArray> params,
            UpdateRule optimizer, NDManager manager) {
        TrainerState state = CheckpointStore.verify(folder);
        requireMatches(state, run, microBatchesPerEpoch, folder);
        try (NDManager loading = manager.newSubManager()) {
            CheckpointStore.Loaded loaded = CheckpointStore.loadVerified(folder, state, loading);
            for (NamedArray param : params) {
                NDArray saved = loaded.weights().get(param.name());
                if (saved == null || !saved.getShape().equals(param.array().getShape())) {
                    throw new UserError("resume_from_checkpoint", folder + " has no weight " + param.name()
                            + " of shape " + param.array().getShape(), "resume from a checkpoint of this model");
                }
                param.array().set(saved.toByteBuffer());
            }
            optimizer.load(loaded.optimizer());
            return loaded.state();
        }
    }

    /**
     * Refuses a checkpoint the recipe and data cannot continue exactly: other resume keys, another seed, another
     * accumulation, or a step beyond the recipe's last. Every checkpoint of the folder would fail alike, so this
     * is the user's choice to make (exit 2), not a reason to fall back to an older one.
     */
    private static void requireMatches(TrainerState state, Trainer.Run run, int microBatchesPerEpoch, Path folder) {
        ResumeKeys.requireUnchanged(state, keys(run, microBatchesPerEpoch), folder.toString());
        long seed = run.training().seed();
        int accumulation = run.schedule().accumulation();
        String where = folder.resolve(CheckpointStore.STATE).toString();
        if (state.seed() != seed) {
            throw new UserError(where, "the checkpoint continues seed " + state.seed() + "'s data order and dropout, "
                    + "not seed " + seed + "'s", "resume with seed: " + state.seed()
                    + ", or start a fresh run in another output_dir");
        }
        if (state.microBatchesConsumed() != state.globalStep() * accumulation) {
            throw new UserError(where, "the checkpoint took " + state.microBatchesConsumed() + " micro batches in "
                    + state.globalStep() + " steps, which gradient_accumulation_steps "
                    + accumulation + " cannot continue",
                    "resume with the batch settings the checkpoint was written with");
        }
        long total = run.schedule().totalSteps();
        if (state.globalStep() > total) {
            throw new UserError(where, "the checkpoint is at step " + state.globalStep() + ", beyond this recipe's "
                    + total + " steps", "raise max_steps or num_epochs, or resume from an earlier checkpoint");
        }
    }

    /**
     * The newest checkpoint whose files match their checksums, saying which newer ones were passed over and why:
     * a disk error or a stray write must cost the steps since the previous checkpoint, never the run.
     */
    private static Path newestIntact(List<CheckpointStore.Saved> complete, Path outputDir) {
        List<String> damaged = new ArrayList<>();
        for (int i = complete.size() - 1; i >= 0; i--) {
            Path folder = complete.get(i).folder();
            try {
                CheckpointStore.verify(folder);
                if (!damaged.isEmpty()) {
                    LOG.warn("warning: resuming from {} instead: {}", folder.getFileName(), String.join("; ", damaged));
                }
                return folder;
            } catch (CheckpointStore.Damaged e) {
                damaged.add(folder.getFileName() + " is damaged (" + e.getMessage().replaceFirst("^damaged checkpoint: ", "")
                        + ")");
            }
        }
        throw new UserError(outputDir.toString(), "no intact checkpoint to resume from: " + String.join("; ", damaged),
                "start over with overwrite_output_dir=true, or restore the checkpoints from a copy");
    }
}
