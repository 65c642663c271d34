package dev.finetune.adapters.lora;

/**
 * State shared by every LoRA projection of one model: whether the adapter contributes, and whether dropout runs.
 *
 * <p>DPO and GRPO need a reference model. For a new adapter it is the base model, and turning the adapter off
 * gives exactly that without a second copy of the weights. For an adapter that training continues
 * ({@code lora_model_dir}) it is, as in TRL, a frozen copy of the starting adapter, which the projections hold
 * next to the trained one when {@link LoraFactory#freezeReference()} was called. Every setting returns a handle
 * that restores the previous value, so a reference pass reads {@code try (var ref = adapters.reference()) { ... }}.
 */
public final class AdapterSwitch {
    private volatile boolean enabled = true;
    private volatile boolean training = false;
    private volatile boolean referencing = false;

    /** A setting that {@link #close()} puts back; it never throws. */
    @FunctionalInterface
    public interface Restore extends AutoCloseable {
        @Override
        void close();
    }

    public boolean enabled() {
        return enabled;
    }

    /** True while training: LoRA dropout is active. Starts false, so inference never drops anything. */
    public boolean training() {
        return training;
    }

    public void setTraining(boolean training) {
        this.training = training;
    }

    public void setEnabled(boolean enabled) {
        this.enabled = enabled;
    }

    /** Turns the adapter off until the handle is closed: the model computes its frozen base. */
    public Restore disabled() {
        boolean previous = enabled;
        enabled = false;
        return () -> enabled = previous;
    }

    /** True inside {@link #reference()}: projections use their frozen copy, or none. */
    public boolean referencing() {
        return referencing;
    }

    /**
     * The reference model until the handle is closed: the frozen starting adapter where one was kept, else the
     * base (adapter off). Never dropout.
     */
    public Restore reference() {
        boolean previous = referencing;
        referencing = true;
        return () -> referencing = previous;
    }

    /** Evaluation mode (no dropout) until the handle is closed. */
    public Restore evaluating() {
        boolean previous = training;
        training = false;
        return () -> training = previous;
    }
}
