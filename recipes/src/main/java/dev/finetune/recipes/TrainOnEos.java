package dev.finetune.recipes;

/** {@code datasets[].train_on_eos} (and {@code train_on_eot}), Axolotl's names: which end-of-turn tokens carry loss. */
public enum TrainOnEos {
    /** Every turn's. */
    ALL,
    /** Those closing a trained turn (Axolotl's default). */
    TURN,
    /** Only the last one. */
    LAST,
    NONE
}
