package dev.finetune.recipes;

import java.util.Locale;

/** {@code save_strategy}, HF's names: when checkpoints are written. */
public enum SaveStrategy {
    NO,
    EPOCH,
    STEPS,
    /** At an evaluation whose {@code metric_for_best_model} is the best so far. */
    BEST;

    public String key() {
        return name().toLowerCase(Locale.ROOT);
    }
}
