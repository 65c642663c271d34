package dev.finetune.trainers.train;

import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * A request from outside the run (SIGTERM from a cluster about to preempt it, SIGINT from Ctrl-C, SIGHUP from a
 * closed terminal or session) to stop at the next step boundary after saving a checkpoint. The loop polls it; the
 * entry point sets it from its signal handler.
 */
public final class StopRequest {
    private static final AtomicReference<String> REQUESTED = new AtomicReference<>();
    private static final AtomicBoolean TRAINING = new AtomicBoolean();
    private static final AtomicReference<Consumer<String>> FORWARD = new AtomicReference<>();

    private StopRequest() {}

    /**
     * Records the request; returns true when a training loop will act on it (it runs and this is the first
     * request), false when the caller must stop the process itself. A loop in other processes (the fsdp ranks) is
     * told at once.
     */
    public static boolean request(String signal) {
        boolean first = REQUESTED.compareAndSet(null, signal);
        boolean acted = first && TRAINING.get();
        Consumer<String> forward = FORWARD.get();
        if (acted && forward != null) {
            forward.accept(signal);
        }
        return acted;
    }

    /**
     * A training loop in other processes runs until the returned scope closes: a request is passed on to it through
     * {@code forward} (which must return at once: it runs in the signal handler), and it stops at its next step
     * boundary with a checkpoint as this JVM's loop does.
     */
    public static AutoCloseable elsewhere(Consumer<String> forward) {
        FORWARD.set(forward);
        TRAINING.set(true);
        String pending = REQUESTED.get();
        if (pending != null) {
            forward.accept(pending);
        }
        return () -> {
            TRAINING.set(false);
            FORWARD.set(null);
        };
    }

    private static final AtomicReference<String> NEWEST_CHECKPOINT = new AtomicReference<>();

    /** The run saved, or resumed from, this complete checkpoint: what a stop at once leaves intact. */
    public static void checkpoint(String folder) {
        NEWEST_CHECKPOINT.set(folder);
    }

    /** The newest complete checkpoint of the running training, or {@code null} when it has none yet. */
    public static String newestCheckpoint() {
        return NEWEST_CHECKPOINT.get();
    }

    /** The signal that asked to stop, or {@code null}. */
    public static String requested() {
        return REQUESTED.get();
    }

    static void training(boolean running) {
        TRAINING.set(running);
    }

    /** A training loop is running in this process. */
    public static boolean training() {
        return TRAINING.get();
    }

    /** The run stopped on request after {@code step} steps; {@code saved} names the checkpoint that holds them. */
    public static final class Stopped extends RuntimeException {
        private final String signal;

        public Stopped(String signal, long step, String saved) {
            super("stopped by SIG" + signal + " after step " + step + ": " + saved
                    + "; continue with resume_from_checkpoint=true");
            this.signal = signal;
        }

        public String signal() {
            return signal;
        }
    }
}
