package dev.finetune.trainers.backend.fsdp;

/**
 * The root cause of a failed run, from everything the ranks and torchrun said: a rank that died of a signal
 * torchrun did not send (a kill, an out-of-memory kill) and said nothing, else the first rank that reported an
 * error (the others' errors are usually their peers vanishing), else what torchrun says. Apart from
 * {@link RankRelay}, which shows and records the ranks' output, because this is the one judgement over all of it.
 */
final class FailureCause {
    private String error;
    private String torchrunFailure;
    private String killed;
    private String killedRank;
    private String failedRank;

    /** An error of the run; the first one stays the one reported (the later ones usually follow from it). */
    void report(String message) {
        if (error == null) {
            error = message;
        }
    }

    /** Whether a rank, or the relay itself, reported an error. */
    boolean reported() {
        return error != null;
    }

    /**
     * torchrun's failure summary lists every failed rank with its exit code or signal. The ranks torchrun itself
     * stopped end with SIGTERM; the one that failed first is any other (its timestamps are whole seconds, so
     * torchrun's own "root cause" can name a rank it stopped).
     */
    void torchrunLine(String text) {
        String t = text.strip();
        if (t.startsWith("rank ") && t.contains("local_rank")) {
            failedRank = t.substring(t.indexOf(':') + 1).strip();
        } else if (t.startsWith("exitcode  :") && failedRank != null) {
            String exit = t.substring("exitcode  :".length()).strip();
            String failure = "rank " + failedRank.replaceAll("\\s*\\(local_rank.*\\)", "") + " exited with "
                    + exit.replaceAll("\\(pid: \\d+\\)\\s*", "").strip();
            if (torchrunFailure == null) {
                torchrunFailure = failure;
            }
            if (killed == null && exit.startsWith("-") && !exit.contains("SIGTERM")) {
                killed = failure;
                killedRank = failedRank.replaceAll("\\s*\\(local_rank.*\\)", "");
            }
        }
    }

    /**
     * The run's one-line failure, root cause first.
     *
     * @param direct the one worker process ran without torchrun ({@link Launch#direct}): its exit code is its own
     * @param host this node's name, for a direct worker killed by a signal
     */
    String why(int exitCode, boolean direct, String host) {
        if (killed != null && (error == null || !error.startsWith("rank " + killedRank + " "))) {
            return killed + (error != null ? " (then " + error + ")" : "");
        }
        if (error != null) {
            return error;
        }
        if (direct) {
            // no torchrun in between: the worker's own exit status (128 + N: killed by signal N)
            return exitCode > 128 ? "rank 0 " + host + " was killed by signal " + (exitCode - 128)
                    + (exitCode - 128 == 9 ? " (SIGKILL: out of memory, or killed from outside)" : "")
                    : "the worker exited with " + exitCode + " before the run finished";
        }
        return torchrunFailure != null ? torchrunFailure
                : "torchrun exited with " + exitCode + " before the run finished";
    }
}
