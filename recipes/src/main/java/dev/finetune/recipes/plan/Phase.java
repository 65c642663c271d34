package dev.finetune.recipes.plan;

/** Stretches of a run with different live memory; the peak is the largest of them, not the sum. */
public enum Phase {
    LOAD("load"),
    FORWARD_BACKWARD("fwd/bwd"),
    OPTIMIZER_STEP("optim"),
    GENERATION("generate"),
    SAVE("save");

    private final String label;

    Phase(String label) {
        this.label = label;
    }

    public String label() {
        return label;
    }
}
