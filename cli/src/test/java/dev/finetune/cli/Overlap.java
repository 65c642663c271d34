package dev.finetune.cli;

import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * Child processes of a test that do not depend on each other, run together: most of a JVM's or a Python
 * process's life here is single-threaded start-up, so one after the other they leave a core idle. What each
 * process computes does not depend on what runs beside it. (The trainers module's FsdpRuns has the same two
 * helpers; modules share no test code.)
 */
final class Overlap {
    private Overlap() {}

    /** Starts {@code work} on a thread of its own. */
    static <T> CompletableFuture<T> start(Callable<T> work) {
        CompletableFuture<T> result = new CompletableFuture<>();
        Thread thread = new Thread(() -> {
            try {
                result.complete(work.call());
            } catch (Throwable t) {
                result.completeExceptionally(t);
            }
        }, "test-overlap");
        thread.setDaemon(true);
        thread.start();
        return result;
    }

    /**
     * Waits for every one, then throws the first one's failure: none is left running into the next step of the
     * test (or into its deleted temporary folder) because another failed.
     */
    static void joinAll(CompletableFuture<?>... all) throws Exception {
        try {
            CompletableFuture.allOf(all).join();
        } catch (CompletionException e) {
            // each one's own failure is thrown below, in order
        }
        for (CompletableFuture<?> one : all) {
            join(one);
        }
    }

    /** Its result, or what it threw (an assertion failure stays one). */
    static <T> T join(CompletableFuture<T> work) throws Exception {
        try {
            return work.join();
        } catch (CompletionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof Exception checked) {
                throw checked;
            }
            if (cause instanceof Error error) {
                throw error;
            }
            throw e;
        }
    }
}
