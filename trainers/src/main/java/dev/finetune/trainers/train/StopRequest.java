package dev.finetune.trainers.train;

import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A request from outside the run (SIGTERM from a cluster about to preempt it, SIGINT from Ctrl-C) to stop at the
 * next step boundary after saving a checkpoint. The loop polls it; the entry point sets it from its signal handler.
 */
public final class StopRequest {
    private static final AtomicReference<String> REQUESTED = new AtomicReference<>();
    private static final AtomicBoolean TRAINING = new AtomicBoolean();

    private StopRequest() {}

    /**
     * Records the request; returns true when a training loop will act on it (it runs and this is the first
     * request), false when the caller must stop the process itself.
     */
    public static boolean request(String signal) {
        boolean first = REQUESTED.compareAndSet(null, signal);
        return first && TRAINING.get();
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

        Stopped(String signal, long step, String saved) {
            super("stopped by SIG" + signal + " after step " + step + ": " + saved
                    + "; continue with resume_from_checkpoint=true");
            this.signal = signal;
        }

        public String signal() {
            return signal;
        }
    }
}
