package dev.finetune.trainers.train.checkpoint;

import java.util.Map;
import java.util.TreeMap;

/**
 * Everything besides tensors that a resumed run needs to continue exactly; saved as {@code finetune_state.json} beside the HF Trainer's {@code trainer_state.json}.
 *
 * <p>Randomness needs no saved generator state: the data order of epoch {@code e} is a permutation drawn from
 * ({@code seed}, {@code e}), and the engine is reseeded from ({@code seed}, step, micro batch, layer) wherever it
 * draws, so {@code seed} and the position restore both streams.
 *
 * @param globalStep optimizer updates done
 * @param epoch fractional epochs consumed, {@code microBatchesConsumed / microBatchesPerEpoch}
 * @param microBatchesConsumed the data position: micro batches consumed since the start, across epochs
 * @param microBatchesPerEpoch the dataset's size in micro batches, to check the data did not change
 * @param seed the recipe's {@code seed}, root of the data-order and engine generators
 * @param lrScheduler the schedule's recipe name; with the next three fields the scheduler state
 * @param totalSteps the updates the schedule was planned for
 * @param warmupSteps resolved warm-up updates
 * @param learningRate the schedule's peak ({@code learning_rate})
 * @param lastLearningRate the rate the last update used
 * @param resumeKeys the recipe values that must not change on resume, by key
 * @param resumeKeysHash SHA-256 over {@code resumeKeys}
 */
public record TrainerState(
        long globalStep,
        double epoch,
        long microBatchesConsumed,
        long microBatchesPerEpoch,
        long seed,
        String lrScheduler,
        long totalSteps,
        long warmupSteps,
        double learningRate,
        double lastLearningRate,
        Map<String, String> resumeKeys,
        String resumeKeysHash) {

    public TrainerState {
        resumeKeys = resumeKeys == null ? null : new TreeMap<>(resumeKeys);
    }

    /**
     * Why these values cannot have been saved by a run, or {@code null}: the file's own fields must agree with
     * each other before the recipe is compared with them.
     */
    String problem() {
        if (resumeKeys == null || resumeKeysHash == null || lrScheduler == null) {
            return "resume_keys, resume_keys_hash or lr_scheduler is missing";
        }
        if (!ResumeKeys.hash(resumeKeys).equals(resumeKeysHash)) {
            return "resume_keys_hash is not the hash of resume_keys";
        }
        if (globalStep < 0 || microBatchesConsumed < 0 || microBatchesPerEpoch < 1 || totalSteps < 1
                || warmupSteps < 0) {
            return "a step or batch count is negative or zero (global_step " + globalStep + ", micro_batches_consumed "
                    + microBatchesConsumed + ", micro_batches_per_epoch " + microBatchesPerEpoch + ", total_steps "
                    + totalSteps + ", warmup_steps " + warmupSteps + ")";
        }
        if (globalStep > totalSteps) {
            return "global_step " + globalStep + " is beyond total_steps " + totalSteps;
        }
        if (microBatchesConsumed < globalStep || (globalStep > 0 && microBatchesConsumed % globalStep != 0)
                || (globalStep == 0 && microBatchesConsumed != 0)) {
            return "micro_batches_consumed " + microBatchesConsumed + " is not a whole number of accumulation windows "
                    + "of global_step " + globalStep;
        }
        double expectedEpoch = (double) microBatchesConsumed / microBatchesPerEpoch;
        if (!Double.isFinite(epoch) || Math.abs(epoch - expectedEpoch) > 1e-9 * Math.max(1, expectedEpoch)) {
            return "epoch " + epoch + " disagrees with micro_batches_consumed / micro_batches_per_epoch";
        }
        if (!Double.isFinite(learningRate) || learningRate < 0 || !Double.isFinite(lastLearningRate)
                || lastLearningRate < 0) {
            return "learning_rate " + learningRate + " or last_learning_rate " + lastLearningRate + " is not a rate";
        }
        return null;
    }
}
