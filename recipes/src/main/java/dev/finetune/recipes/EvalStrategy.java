package dev.finetune.recipes;

import java.util.Locale;

/** {@code eval_strategy}, HF's names: when the evaluation split is scored. */
public enum EvalStrategy {
    NO,
    EPOCH,
    STEPS;

    public String key() {
        return name().toLowerCase(Locale.ROOT);
    }
}
