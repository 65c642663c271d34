package dev.finetune.trainers.train.checkpoint;

import java.util.Map;
import java.util.TreeMap;

/**
 * Everything besides tensors that a resumed run needs to continue exactly; saved as {@code trainer_state.json}.
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
        resumeKeys = new TreeMap<>(resumeKeys);
    }
}
