package dev.finetune.trainers.rewards;

import com.google.gson.Gson;
import com.google.gson.JsonObject;
import dev.finetune.recipes.BoundedLineReader;
import dev.finetune.recipes.RewardSpec;
import dev.finetune.recipes.UserError;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * An external reward program, started once and kept running: for every completion it gets one JSON line
 * {@code {"prompt", "completion", "fields"}} on stdin and answers one number per line on stdout, in order. Any
 * language works. A program that exits, prints something that is not a finite number, or stays silent past the
 * timeout stops the run with a {@link UserError} that quotes what it printed and the end of its stderr.
 */
final class CommandReward implements RewardFunction {
    private static final Gson GSON = new Gson();
    private static final int STDERR_LINES_KEPT = 10;
    /** Marks the end of the program's stdout in the line queue. */
    private static final Optional<String> END = Optional.empty();

    private final RewardSpec.Command spec;
    private final Duration timeout;
    private final Process process;
    private final BufferedWriter stdin;
    /** Bounded: a program that prints without end waits on its own output instead of filling this JVM. */
    private final BlockingQueue<Optional<String>> lines = new LinkedBlockingQueue<>(4096);
    /** The longest score line read (a number), and the longest stderr line kept. */
    private static final int MAX_ANSWER_CHARS = 1 << 20;
    private static final int MAX_STDERR_CHARS = 2000;
    private final Deque<String> stderrTail = new ArrayDeque<>();
    /** The program printed a line longer than {@link #MAX_ANSWER_CHARS} (no line break, or no number). */
    private volatile boolean overlong;

    CommandReward(RewardSpec.Command spec, Duration timeout) {
        this.spec = spec;
        this.timeout = timeout;
        ProcessBuilder builder = new ProcessBuilder("sh", "-c", spec.command());
        if (spec.workingDir() != null) {
            builder.directory(spec.workingDir().toFile());
        }
        try {
            process = builder.start();
        } catch (IOException e) {
            throw new UserError(where(), "cannot start the reward command '" + spec.command() + "': " + e.getMessage(),
                    "check that sh exists and the command runs from " + spec.workingDir());
        }
        stdin = new BufferedWriter(new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8));
        daemon("reward-stdout-" + spec.label(), () -> pump(process.getInputStream(), true));
        daemon("reward-stderr-" + spec.label(), () -> pump(process.getErrorStream(), false));
    }

    private static void daemon(String name, Runnable body) {
        Thread thread = new Thread(body, name);
        thread.setDaemon(true);
        thread.start();
    }

    private void pump(InputStream stream, boolean answers) {
        // A score is a short number and stderr is shown as a tail: a program printing one endless line costs its
        // bound, and a cut answer is no number, so it stops the run with the program's own words.
        try (BoundedLineReader reader = new BoundedLineReader(new InputStreamReader(stream, StandardCharsets.UTF_8),
                answers ? MAX_ANSWER_CHARS : MAX_STDERR_CHARS)) {
            String line;
            while ((line = reader.readLine()) != null) {
                if (answers) {
                    if (reader.cut()) {
                        // said as it is, whether it came before any input or in place of a score
                        overlong = true;
                    }
                    lines.put(Optional.of(line));
                } else {
                    synchronized (stderrTail) {
                        stderrTail.addLast(line);
                        if (stderrTail.size() > STDERR_LINES_KEPT) {
                            stderrTail.removeFirst();
                        }
                    }
                }
            }
        } catch (IOException e) {
            // the stream closes when the process dies; the reader of the answers reports that
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            if (answers) {
                lines.offer(END);
            }
        }
    }

    @Override
    public String label() {
        return spec.label();
    }

    @Override
    public double[] score(List<RewardInput> inputs) {
        requireNoExtraLines(0);
        try {
            for (RewardInput input : inputs) {
                JsonObject line = new JsonObject();
                line.addProperty("prompt", input.prompt());
                line.addProperty("completion", input.completion());
                line.add("fields", input.fields() == null ? new JsonObject() : input.fields());
                stdin.write(GSON.toJson(line));
                stdin.write('\n');
            }
            stdin.flush();
        } catch (IOException e) {
            throw failure("stopped reading its input (" + e.getMessage() + ")");
        }
        double[] scores = new double[inputs.size()];
        for (int i = 0; i < scores.length; i++) {
            Optional<String> line;
            try {
                line = lines.poll(timeout.toMillis(), TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw failure("was interrupted");
            }
            if (line == null) {
                killTree();
                throw failure("gave " + i + " of " + scores.length + " scores and then nothing for "
                        + timeout.toSeconds() + " s (stopped it)");
            }
            if (line.isEmpty()) {
                lines.offer(END);
                throw failure("exited" + exitCode() + " after " + i + " of " + scores.length + " scores");
            }
            try {
                scores[i] = Double.parseDouble(line.get().strip());
            } catch (NumberFormatException e) {
                scores[i] = Double.NaN;
            }
            if (!Double.isFinite(scores[i])) {
                requireNoOverlongLine();
                throw failure("printed '" + abbreviate(line.get()) + "' where a number was expected (score " + (i + 1)
                        + " of " + scores.length + ")");
            }
        }
        requireNoExtraLines(scores.length);
        return scores;
    }

    /**
     * One line per completion is the whole protocol: a line beyond that would shift every later score onto the
     * wrong completion, so it stops the run. Checked after each batch and again before the next one is sent (a
     * late extra line is then waiting in the queue).
     */
    private void requireNoExtraLines(int expected) {
        Optional<String> extra = lines.peek();
        if (extra != null && extra.isPresent()) {
            killTree();
            requireNoOverlongLine();
            throw failure("printed more lines than completions (" + (expected == 0 ? "a line before any input"
                    : "after " + expected + " scores for " + expected + " completions") + ": '"
                    + abbreviate(extra.get()) + "')");
        }
    }

    private void requireNoOverlongLine() {
        if (overlong) {
            throw failure("printed a line of over " + (MAX_ANSWER_CHARS >> 20) + " MiB (no line break?) where a number "
                    + "was expected; it was cut there and stopped");
        }
    }

    /** Stops the program and everything it started (a shell's children outlive it otherwise). */
    private void killTree() {
        List<ProcessHandle> descendants = process.descendants().toList();
        process.destroyForcibly();
        descendants.forEach(ProcessHandle::destroyForcibly);
        try {
            process.waitFor(2, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private String exitCode() {
        try {
            if (process.waitFor(2, TimeUnit.SECONDS)) {
                return " with code " + process.exitValue();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return "";
    }

    private UserError failure(String what) {
        String stderr;
        synchronized (stderrTail) {
            stderr = stderrTail.isEmpty() ? "" : "; its stderr ends with: " + String.join(" | ", stderrTail);
        }
        return new UserError(where(), "the reward command '" + spec.command() + "' " + what + stderr,
                "it must read one JSON line per completion on stdin and print one number per line, flushing each; "
                        + "try it with finetune rewards RECIPE --dry-run");
    }

    private String where() {
        return "trl.reward_funcs: " + spec.label();
    }

    private static String abbreviate(String text) {
        return text.length() <= 80 ? text : text.substring(0, 77) + "...";
    }

    /** Closing stdin lets a well-behaved program finish; one that does not is killed. */
    @Override
    public void close() {
        try {
            stdin.close();
        } catch (IOException e) {
            // already gone
        }
        try {
            if (!process.waitFor(5, TimeUnit.SECONDS)) {
                killTree();
            }
        } catch (InterruptedException e) {
            killTree();
            Thread.currentThread().interrupt();
        }
        // a program that exits on end of input may leave children of its own running
        process.descendants().forEach(ProcessHandle::destroyForcibly);
    }
}
