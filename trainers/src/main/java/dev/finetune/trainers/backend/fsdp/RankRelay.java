package dev.finetune.trainers.backend.fsdp;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.reflect.TypeToken;
import dev.finetune.trainers.backend.EstimateReport;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.output.LogWindow;
import dev.finetune.trainers.train.output.MetricsLog;
import dev.finetune.trainers.train.output.Progress;
import dev.finetune.trainers.train.output.TrainResults;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The ranks' output turned into the run's display and files: their JSON events into the progress bar,
 * {@code metrics.jsonl} (node 0 only), the plan-vs-measured report and the result; their other lines shown with rank
 * and host; and the failure to report when the run fails, root cause first.
 */
final class RankRelay {
    private static final Gson GSON = new Gson();

    private final Path outputDir;
    private final Launch launch;
    private final FsdpBackend.Settings settings;
    private final String host;
    private final List<Long> pids = new java.util.concurrent.CopyOnWriteArrayList<>();
    private final List<Map<String, Object>> peaks = new ArrayList<>();
    private final List<String> saved = new ArrayList<>();
    private final Trainer.Run schedule;
    /** torchrun prints a rank's stdout and its stderr under the same header, so each stream is joined apart. */
    private final TeeLines stdoutTee = new TeeLines();
    private final TeeLines stderrTee = new TeeLines();
    /** Only for a direct launch: torchrun's --tee keeps the ranks' logs otherwise. */
    private final DirectWorkerLog directLog;
    private MetricsLog metrics;
    private LogWindow window;
    private long totalSteps;
    private Progress progress;
    private EstimateReport report;
    /** The plan-vs-measured fields of the first step's metrics line, set when the ranks report their peaks. */
    private Map<String, Object> firstStepPeak = Map.of();
    private long firstStepPeakAt = -1;
    private long step;
    private double lastLoss = Double.NaN;
    private double firstEval = Double.NaN;
    private double lastEval = Double.NaN;
    private final FailureCause failure = new FailureCause();
    private boolean done;
    private volatile boolean stopRequested;
    private Stopped stoppedAt;
    /** This run's share of the summary (a resumed run counts from its resume step), as the JVM trainer sums it. */
    private long startedAt;
    private long lastStepAt;
    private long firstStep;
    private long stepsRun;
    private long samples;
    private double lossSum;
    private double epoch;
    private long numTokens;
    private long flosParameters;

    RankRelay(Path outputDir, Launch launch, FsdpBackend.Settings settings, Trainer.Run schedule) {
        this.outputDir = outputDir;
        this.schedule = schedule;
        this.launch = launch;
        this.settings = settings;
        this.directLog = launch.direct() ? new DirectWorkerLog(outputDir) : null;
        String name;
        try {
            name = InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            name = "localhost";
        }
        this.host = name;
    }

    /** A line torchrun (or the one worker process, {@link Launch#direct}) printed on its stdout. */
    synchronized void stdout(String raw) {
        keep(raw);
        stdoutTee.accept(raw).forEach(this::relay);
    }

    /** A line torchrun printed on its stderr: the ranks' warnings and tracebacks, and torchrun's own log. */
    synchronized void stderr(String raw) {
        keep(raw);
        stderrTee.accept(raw).forEach(this::relay);
    }

    private void keep(String raw) {
        if (directLog != null) {
            directLog.write(raw);
        }
    }

    private void relay(TeeLines.Line line) {
        String text = line.text();
        String who = "torchrun " + host;
        if (line.localRank() >= 0 || launch.direct()) {
            who = "rank " + (launch.nodeRank() * launch.nprocPerNode() + Math.max(0, line.localRank())) + " " + host;
        }
        if (text.startsWith("{")) {
            JsonObject event = parse(text);
            if (event != null && event.has("event")) {
                event(event);
                return;
            }
        }
        failure.torchrunLine(text);
        if (!text.isBlank() && !noise(text)) {
            settings.out().println("[" + who + "] " + text);
            settings.out().flush();
        }
    }

    private static boolean noise(String text) {
        return text.contains("Loading weights:") || text.startsWith("*****")
                || text.contains("Setting OMP_NUM_THREADS environment variable");
    }

    /** The run's one-line failure, root cause first ({@link FailureCause}). */
    String why(int exitCode) {
        return failure.why(exitCode, launch.direct(), host);
    }

    private static JsonObject parse(String text) {
        try {
            JsonElement element = JsonParser.parseString(text);
            return element.isJsonObject() ? element.getAsJsonObject() : null;
        } catch (RuntimeException e) {
            return null;
        }
    }

    private void event(JsonObject event) {
        try {
            handle(event);
        } finally {
            settings.out().flush();
        }
    }

    private void handle(JsonObject event) {
        String kind = event.get("event").getAsString();
        String who = event.has("rank") ? "rank " + event.get("rank").getAsInt() + " "
                + (event.has("host") ? event.get("host").getAsString() : host) : "worker";
        PrintWriter out = settings.out();
        switch (kind) {
            case "rank" -> {
                long pid = event.get("pid").getAsLong();
                pids.add(pid);
                if (stopRequested) {
                    askToStop(pid);
                }
                out.printf(Locale.ROOT, "[%s] started, pid %d%n", who, event.get("pid").getAsLong());
            }
            case "start" -> {
                step = event.get("step").getAsLong();
                firstStep = step;
                startedAt = System.nanoTime();
                flosParameters = event.get("flos_parameters").getAsLong();
                long total = event.get("total_steps").getAsLong();
                if (launch.nodeRank() == 0) {
                    boolean tensorBoard = schedule.tensorBoard();
                    metrics = step > 0 ? MetricsLog.resume(outputDir, step, tensorBoard)
                            : MetricsLog.start(outputDir, tensorBoard);
                }
                totalSteps = total;
                window = new LogWindow(schedule.schedule().logEvery());
                out.printf(Locale.ROOT, "[%s] model: %,d parameters, %,d trainable, on %s; %d steps%n", who,
                        event.get("parameters").getAsLong(), event.get("trainable_parameters").getAsLong(),
                        event.get("device").getAsString(), total);
                if (event.has("kernels")) {
                    // what the worker computes with, and each fast-path piece it could not use, with the reason
                    out.printf(Locale.ROOT, "[%s] kernels: %s%n", who, event.get("kernels").getAsString());
                    event.getAsJsonArray("kernel_notes").forEach(n -> out.printf(Locale.ROOT, "[%s] note: %s%n", who,
                            n.getAsString()));
                }
                progress = Progress.forRun(step, total);
                report = new EstimateReport(settings.plan(), out, total);
            }
            case "resumed" -> {
                dev.finetune.trainers.train.StopRequest.checkpoint(event.get("folder").getAsString());
                out.printf(Locale.ROOT, "[%s] resumed from %s at step %d (saved by %d rank(s))%n", who,
                    event.get("folder").getAsString(), event.get("step").getAsLong(),
                        event.get("saved_world_size").getAsInt());
            }
            case "metrics" -> {
                metrics(event.getAsJsonObject("metrics"));
                if (event.has("samples")) {
                    samples += event.get("samples").getAsLong();
                }
            }
            case "peak_memory" -> peaks(event);
            case "checkpoint" -> {
                out.printf(Locale.ROOT, "[%s] saved %s%n", who, event.get("folder").getAsString());
                dev.finetune.trainers.train.StopRequest.checkpoint(event.get("folder").getAsString());
            }
            case "saved" -> event.getAsJsonArray("files").forEach(f -> saved.add(f.getAsString()));
            case "done" -> done = true;
            case "stopped" -> stoppedAt = new Stopped(event.get("step").getAsLong(), event.get("folder").getAsString());
            case "error" -> {
                String message = event.get("message").getAsString();
                // the whole traceback is printed below; the run's one-line error keeps to the point
                message = message.length() > 400 ? message.substring(0, 400) + " ..." : message;
                failure.report(who + " failed: " + message);
                out.println("[" + who + "] " + event.get("traceback").getAsString().strip()
                        .replace("\n", "\n[" + who + "] "));
            }
            default -> out.println("[" + who + "] " + event);
        }
    }

    private void metrics(JsonObject json) {
        Map<String, Object> line = GSON.fromJson(json, new TypeToken<LinkedHashMap<String, Object>>() {}.getType());
        // JSON numbers come back as doubles; the step is an integer in metrics.jsonl as the JVM trainer writes it.
        long at = json.get("step").getAsLong();
        line.put("step", at);
        if (at == firstStepPeakAt) {
            line.putAll(firstStepPeak);
        }
        // The worker reports every step; logging_steps folds them here, as the JVM trainer's loop does.
        Map<String, Object> logged = window == null ? line : window.add(at, totalSteps, line);
        if (metrics == null && launch.nodeRank() == 0) {
            // never quietly: a run whose metrics.jsonl misses steps looks finished and is not
            failure.report("worker: step " + at + " reported before the run's start event, so metrics.jsonl would "
                    + "miss it");
        }
        if (metrics != null && logged != null) {
            metrics.write(logged);
        }
        if (report != null && json.has("loss")) {
            report.afterStep(at, line);
        }
        if (json.has("eval_loss")) {
            lastEval = json.get("eval_loss").getAsDouble();
            if (Double.isNaN(firstEval) && at == 0) {
                firstEval = lastEval;
            }
        }
        if (json.has("loss")) {
            step = at;
            lastLoss = json.get("loss").getAsDouble();
            lastStepAt = System.nanoTime();
            stepsRun++;
            lossSum += lastLoss;
            epoch = json.get("epoch").getAsDouble();
            numTokens = json.get("num_tokens").getAsLong();
            if (progress != null) {
                progress.step(at, logged);
            }
        }
    }

    /**
     * Once torchrun has ended: {@code train_results.json} and TensorBoard's closing entry, as the JVM trainer writes
     * them at the end of its loop, from the steps this run relayed (their per-step losses, the samples of their
     * global batches, the tokens so far) and its time from the start event to the last step. Node 0 only, and only
     * for a run that succeeded (a rank that aborts on its way out fails the run after its last step).
     */
    void finish(int exitCode) {
        if (exitCode != 0 || failed() || metrics == null || stepsRun == 0 || stoppedAt != null) {
            return;
        }
        Map<String, Object> summary = TrainResults.summary(step, epoch, (lastStepAt - startedAt) / 1e9, stepsRun,
                samples, lossSum, numTokens, flosParameters);
        TrainResults.write(outputDir, summary);
        metrics.summary(step, summary);
        settings.out().println("run summary: " + summary);
    }

    /**
     * Each rank's measured peak after the first optimizer step beside the plan's per-device estimate; the
     * largest goes into that step's metrics line under the single-device run's names, with the bytes of the ranks'
     * tensors per plan term and their load peak ({@link EstimateReport#tensors}).
     */
    private void peaks(JsonObject event) {
        String measuredAs = event.has("measured") ? event.get("measured").getAsString() : "resident set, VmHWM";
        long at = event.has("step") ? event.get("step").getAsLong() : step + 1;
        double largest = -1;
        // the largest rank per term: the plan's per-device figures promise what every rank fits in
        Map<String, Long> tensors = new LinkedHashMap<>();
        double loadPeak = -1;
        String tensorsWho = "";
        JsonArray ranks = event.getAsJsonArray("ranks");
        for (JsonElement element : ranks) {
            JsonObject rank = element.getAsJsonObject();
            if (rank.has("tensors")) {
                rank.getAsJsonObject("tensors").entrySet().forEach(t -> tensors.merge(t.getKey(),
                        t.getValue().getAsLong(), Math::max));
            }
            if (rank.has("load_peak_memory_mb")) {
                loadPeak = Math.max(loadPeak, rank.get("load_peak_memory_mb").getAsDouble());
            }
            double mb = rank.get("peak_memory_mb").getAsDouble();
            Map<String, Object> peak = new LinkedHashMap<>();
            peak.put("rank", rank.get("rank").getAsInt());
            peak.put("host", rank.get("host").getAsString());
            peak.put("peak_memory_mb", mb);
            peaks.add(peak);
            String who = "[rank " + rank.get("rank").getAsInt() + " " + rank.get("host").getAsString() + "] ";
            tensorsWho = ranks.size() == 1 ? who : "[largest of " + ranks.size() + " ranks] ";
            Map<String, Object> compared = report == null ? Map.of()
                    : report.firstStep(Map.of("step", at, "peak_memory_mb", mb), who, measuredAs);
            if (compared.isEmpty()) {
                settings.out().printf(Locale.ROOT, "%speak memory after step %d: %.0f MiB (%s)%n", who, at, mb,
                        measuredAs);
            }
            if (mb > largest) {
                largest = mb;
                firstStepPeak = compared;
                firstStepPeakAt = at;
            }
        }
        if (report != null && !tensors.isEmpty()) {
            Map<String, Object> fields = new LinkedHashMap<>(firstStepPeak);
            fields.putAll(report.tensors(at, tensors, loadPeak < 0 ? Double.NaN : loadPeak, tensorsWho));
            firstStepPeak = fields;
            firstStepPeakAt = at;
        }
    }

    List<Long> pids() {
        return pids;
    }

    /** Where the ranks stopped on request, with the checkpoint they saved there. */
    record Stopped(long step, String folder) {}

    /** The ranks stopped on request after saving a checkpoint, or null. */
    Stopped stoppedAt() {
        return stoppedAt;
    }

    /**
     * Asks every rank to stop at its next step boundary with a checkpoint (SIGUSR1: the worker's own signal, so
     * torchrun's handling of TERM, INT and HUP never comes into it); a rank that reports later is asked when it does.
     * Called from a signal handler: it only starts {@code kill} processes.
     */
    void requestStop() {
        stopRequested = true;
        pids.forEach(RankRelay::askToStop);
    }

    private static void askToStop(long pid) {
        try {
            new ProcessBuilder("kill", "-USR1", Long.toString(pid)).start();
        } catch (IOException e) {
            // that rank is then stopped with the others when this process ends
        }
    }

    /** A rank reported an error, or the run never said it finished. */
    boolean failed() {
        return failure.reported() || !done;
    }

    FsdpBackend.Result result() {
        return new FsdpBackend.Result(outputDir, step, lastLoss, firstEval, lastEval, peaks, saved);
    }

    synchronized void close() {
        stdoutTee.rest().forEach(this::relay);
        stderrTee.rest().forEach(this::relay);
        if (directLog != null) {
            directLog.close();
        }
        if (progress != null) {
            progress.close();
        }
        if (metrics != null) {
            try {
                metrics.close();
            } catch (RuntimeException e) {
                // the run's own error, if any, is the one to report; else this one fails the run
                failure.report(e.getMessage());
            }
        }
    }
}
