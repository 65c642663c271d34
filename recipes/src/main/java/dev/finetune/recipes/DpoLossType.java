package dev.finetune.recipes;

import java.util.Locale;

/** {@code dpo_loss_type}: the DPO losses we train; TRL's other loss types are rejected by the reader. */
public enum DpoLossType {
    /** DPO's log-sigmoid of the scaled margin (TRL's default). */
    SIGMOID,
    /** IPO: squared distance of the margin from {@code 1/(2 beta)}. */
    IPO;

    public String key() {
        return name().toLowerCase(Locale.ROOT);
    }
}
