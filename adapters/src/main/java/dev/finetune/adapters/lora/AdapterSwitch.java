package dev.finetune.adapters.lora;

/**
 * State shared by every LoRA projection of one model: whether the adapter contributes, and whether dropout runs.
 *
 * <p>DPO and GRPO need the base model as their reference; turning the adapter off gives exactly that without a
 * second copy of the weights. Both settings return a handle that restores the previous value, so a reference
 * pass reads {@code try (var base = adapters.disabled()) { ... }}.
 */
public final class AdapterSwitch {
    private volatile boolean enabled = true;
    private volatile boolean training = false;

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

    /** Evaluation mode (no dropout) until the handle is closed. */
    public Restore evaluating() {
        boolean previous = training;
        training = false;
        return () -> training = previous;
    }
}
