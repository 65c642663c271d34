package dev.finetune.cli.reliability;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * One probe of the reliability suite: a situation built in its own folder, one {@code finetune} command run in a
 * child JVM, and what must come of it.
 *
 * @param name short, unique: the table's first column
 * @param kind the class of failure it probes
 * @param exit 0 (the correct result) or 2 (refused with one clear line)
 * @param expect text the error line must hold (exit 2: the file, line or key it names) or the output must hold
 *     (exit 0)
 * @param seconds the bound after which the child counts as hung and is killed (a hang detector, not a speed test)
 * @param megabytes the bound on the child's peak resident memory
 * @param setup builds the situation in the case's folder and says what to run
 * @param check anything more to verify afterwards (files, contents), or {@code null}
 */
record Case(String name, Kind kind, int exit, String expect, int seconds, int megabytes, Setup setup, Check check) {

    enum Kind { DATA_LOSS, CORRUPTION, UNTRUSTED, BOUNDS, MESSAGES, FAULTS }

    /** A quick command (validate, plan, refusals before the engine loads). */
    static final int QUICK_SECONDS = 60;
    static final int QUICK_MB = 400;
    /** A short training run on the embedded 260K model. */
    static final int TRAIN_SECONDS = 180;
    static final int TRAIN_MB = 1200;
    /** An fsdp run (the launcher JVM's memory; the ranks are measured by the worker). */
    static final int FSDP_SECONDS = 600;

    @FunctionalInterface
    interface Setup {
        Invocation prepare(Path dir) throws Exception;
    }

    @FunctionalInterface
    interface Check {
        void verify(Path dir, Outcome outcome) throws Exception;
    }

    /**
     * What to run, from {@code dir/work}.
     *
     * @param args the command line after {@code finetune}
     * @param writable paths the command may create or change (for exit 0: its output_dir); everything else under
     *     the case folder belongs to the user and must be left exactly as it was
     * @param stdin bytes for the child's standard input, or {@code null}
     * @param during run while the child runs (to signal it, say), or {@code null}
     * @param cleanup run afterwards in every case (stop a background process it started), or {@code null}
     */
    record Invocation(List<String> args, List<Path> writable, String stdin, During during, Runnable cleanup,
            long fileSizeLimitKb, boolean ownSession, java.util.Map<String, String> env) {
        Invocation(List<String> args, List<Path> writable, String stdin, During during, Runnable cleanup) {
            this(args, writable, stdin, during, cleanup, 0, false, java.util.Map.of());
        }

        /** Adds {@code key=value} to the child's environment. */
        Invocation withEnv(String key, String value) {
            java.util.Map<String, String> all = new java.util.LinkedHashMap<>(env);
            all.put(key, value);
            return new Invocation(args, writable, stdin, during, cleanup, fileSizeLimitKb, ownSession, all);
        }

        /**
         * The child leads a session and process group of its own, as a command started from a terminal does: a
         * signal sent to that group (Ctrl-C) reaches it and everything it started that stayed in the group.
         */
        Invocation inOwnSession() {
            return new Invocation(args, writable, stdin, during, cleanup, fileSizeLimitKb, true, env);
        }

        static Invocation of(String... args) {
            return new Invocation(List.of(args), List.of(), null, null, null);
        }

        /** Every file the child writes stops at this size (RLIMIT_FSIZE): a disk that fills up, without root. */
        Invocation fileSizeLimit(long kb) {
            return new Invocation(args, writable, stdin, during, cleanup, kb, ownSession, env);
        }

        Invocation writing(Path... paths) {
            List<Path> all = new ArrayList<>(writable);
            all.addAll(List.of(paths));
            return new Invocation(args, all, stdin, during, cleanup, fileSizeLimitKb, ownSession, env);
        }

        Invocation input(String text) {
            return new Invocation(args, writable, text, during, cleanup, fileSizeLimitKb, ownSession, env);
        }

        Invocation whileRunning(During action) {
            return new Invocation(args, writable, stdin, action, cleanup, fileSizeLimitKb, ownSession, env);
        }

        Invocation finallyDo(Runnable action) {
            return new Invocation(args, writable, stdin, during, action, fileSizeLimitKb, ownSession, env);
        }
    }

    @FunctionalInterface
    interface During {
        void act(Process child) throws Exception;
    }

    /** What the child did. */
    record Outcome(int exit, String out, String err, double seconds, long peakMb, List<String> problems) {}

    static Case refused(String name, Kind kind, String expect, Setup setup) {
        return new Case(name, kind, 2, expect, QUICK_SECONDS, QUICK_MB, setup, null);
    }

    static Case works(String name, Kind kind, String expect, Setup setup) {
        return new Case(name, kind, 0, expect, QUICK_SECONDS, QUICK_MB, setup, null);
    }

    Case training() {
        return new Case(name, kind, exit, expect, TRAIN_SECONDS, TRAIN_MB, setup, check);
    }

    /** A run of the fsdp backend: torchrun and Python ranks start (tens of seconds on two busy cores). */
    Case fsdp() {
        return new Case(name, kind, exit, expect, FSDP_SECONDS, TRAIN_MB, setup, check);
    }

    Case then(Check more) {
        return new Case(name, kind, exit, expect, seconds, megabytes, setup, more);
    }
}
