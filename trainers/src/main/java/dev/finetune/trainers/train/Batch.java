package dev.finetune.trainers.train;

/**
 * One micro batch as the loop sees it: opaque data that only its {@link Objective} reads, plus the two counts the
 * loop needs without knowing the objective.
 */
public interface Batch {

    /** Real (non-padding) tokens the model processes; the numerator of tokens per second. */
    long tokenCount();

    /**
     * How many units the objective's loss sums over (target tokens for SFT, pairs for DPO). The loop divides every
     * micro batch's summed loss by the total over the whole accumulation window, so accumulating k micro batches
     * gives exactly the loss of one batch k times as large, padding or not.
     */
    long lossWeight();

    /**
     * Examples in the batch as the Hugging Face Trainer counts them for {@code train_samples_per_second}: rows
     * (packed sequences for SFT, pairs for DPO, completions for GRPO).
     */
    default long samples() {
        return 1;
    }
}
