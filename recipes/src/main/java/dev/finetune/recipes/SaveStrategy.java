package dev.finetune.recipes;

import java.util.Locale;

/** {@code save_strategy}, HF's names: when checkpoints are written. */
public enum SaveStrategy {
    NO,
    EPOCH,
    STEPS,
    /** The checkpoint with the best {@code metric_for_best_model}; our trainer saves by {@code save_steps} instead. */
    BEST;

    public String key() {
        return name().toLowerCase(Locale.ROOT);
    }
}
