package dev.finetune.recipes;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * {@code dpo_loss_type}: TRL 1.13's DPO loss types, named as TRL names them ({@code aot_pair}, TRL's former
 * name of {@code aot_unpaired}, is read as it). Several may be given, summed with {@code dpo_loss_weights}.
 */
public enum DpoLossType {
    /** DPO's log-sigmoid of the scaled margin (TRL's default). */
    SIGMOID,
    /** SLiC's hinge on the scaled margin. */
    HINGE,
    /** IPO: squared distance of the per-token margin from {@code 1/(2 beta)}. */
    IPO,
    /** EXO: KL from the two-way softmax of the scaled ratios to {@code [1 − ε, ε]}. */
    EXO_PAIR,
    /** NCA over the pair. */
    NCA_PAIR,
    /** Robust DPO, unbiased under label noise {@code ε}. */
    ROBUST,
    /** BCO over the pair. */
    BCO_PAIR,
    /** SPPO with hard win/lose probabilities. */
    SPPO_HARD,
    /** AOT: sorted policy margins against sorted reference margins across the batch. */
    AOT,
    /** AOT over sorted chosen and rejected ratios separately. */
    AOT_UNPAIRED,
    /** APO-zero: raise chosen, lower rejected likelihood. */
    APO_ZERO,
    /** APO-down: lower both, rejected more. */
    APO_DOWN,
    /** DiscoPOP: logistic and exponential losses blended by the margin. */
    DISCOPOP,
    /** Cross-entropy on the chosen answers (with sigmoid: RPO, the former {@code rpo_alpha}). */
    SFT,
    /** Sigmoid on per-token margins. */
    SIGMOID_NORM;

    /** IPO compares per-token means, so long answers do not win by length alone (TRL does the same). */
    public boolean perTokenMean() {
        return this == IPO;
    }

    public String key() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The type named {@code key} as TRL spells it, or {@code null}. */
    public static DpoLossType of(String key) {
        String name = "aot_pair".equals(key) ? "aot_unpaired" : key;
        return Arrays.stream(values()).filter(t -> t.key().equals(name)).findFirst().orElse(null);
    }

    public static List<String> keys() {
        return Arrays.stream(values()).map(DpoLossType::key).toList();
    }

    /** The losses that read {@code dpo_label_smoothing}; TRL ignores it in all others (sigmoid included). */
    public boolean usesLabelSmoothing() {
        return this == ROBUST || this == EXO_PAIR || this == AOT || this == AOT_UNPAIRED;
    }

    /** The losses that divide by beta. */
    public boolean needsPositiveBeta() {
        return this == IPO || this == SPPO_HARD;
    }
}
