package dev.finetune.trainers.backend.fsdp;

import com.google.gson.Gson;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.reflect.TypeToken;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.backend.EstimateReport;
import dev.finetune.trainers.backend.OutputFolder;
import dev.finetune.trainers.backend.Provenance;
import dev.finetune.trainers.backend.RunFiles;
import dev.finetune.trainers.backend.SingleDeviceBackend;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.output.LogWindow;
import dev.finetune.trainers.train.output.LossCurve;
import dev.finetune.trainers.train.output.MetricsLog;
import dev.finetune.trainers.train.output.Progress;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code backend: fsdp}: the recipe trained by the Python worker under torchrun, FSDP2 over the ranks (DESIGN.md
 * §6). This side validates, preprocesses, writes the worker's plan, starts torchrun, and turns the ranks' JSON lines
 * into the same progress display, {@code metrics.jsonl} and {@code loss.png} as the single-device trainer.
 */
public final class FsdpBackend {
    private static final Gson GSON = new Gson();
    private static final Pattern TEE_PREFIX = Pattern.compile("^\\[default(\\d+)\\]:(.*)$");

    /**
     * @param plan the recipe's memory and time plan: its per-device peak is set beside each rank's measured peak
     *     after the first step, its speed beside the measured one; or null
     * @param environment added to the ranks' environment (the failure drills of the tests use it)
     * @param allowCommands the user passed {@code --allow-commands}: GRPO reward commands named in the recipe may run
     */
    public record Settings(Launch launch, RunPlan plan, PrintWriter out, Map<String, String> environment,
            boolean allowCommands) {
        public Settings(Launch launch, RunPlan plan, PrintWriter out) {
            this(launch, plan, out, Map.of(), false);
        }

        public Settings(Launch launch, RunPlan plan, PrintWriter out, Map<String, String> environment) {
            this(launch, plan, out, environment, false);
        }
    }

    /** What a finished run reports. */
    public record Result(Path outputDir, long steps, double lastLoss, double firstEvalLoss, double lastEvalLoss,
            List<Map<String, Object>> rankPeaks, List<String> savedFiles) {}

    /** A rank failed or torchrun gave up: the run failed, with the first rank's own error when it sent one. */
    public static final class WorkerFailed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        WorkerFailed(String message) {
            super(message);
        }
    }

    private FsdpBackend() {}

    /** Whether {@code backend: auto} picks this backend: several GPUs declared, an fsdp block, or asked for. */
    public static boolean wanted(Recipe recipe, Integer nprocPerNode) {
        return recipe.backend() == Recipe.Backend.FSDP
                || (recipe.backend() == Recipe.Backend.AUTO && (recipe.distributed().sharded()
                        || recipe.hardware().devices() > 1 || nprocPerNode != null));
    }

    /** Refuses what the worker does not run, before anything is written. */
    public static void requireRunnable(Recipe recipe) {
        WorkerPlan.objective(recipe);
        if (recipe.distributed().contextParallelSize() > 1 || recipe.distributed().tensorParallelSize() > 1) {
            throw new UserError("context_parallel_size", "the fsdp backend shards data-parallel only (FSDP2); context "
                    + "and tensor parallelism are not in this build", "remove context_parallel_size/tensor_parallel_size");
        }
    }

    /** {@code --dry-run}: the exact command, environment and global batch identity; nothing starts. */
    public static String dryRun(ValidatedRecipe validated, Launch launch, String python) {
        Recipe recipe = validated.recipe();
        Path outputDir = Path.of(recipe.output().outputDir()).toAbsolutePath();
        Path worker = outputDir.resolve(WorkerPlan.FOLDER);
        int micro = validated.plan().micro();
        int accumulation = validated.plan().accumulation();
        int perStep = accumulation * launch.worldSize();
        StringBuilder s = new StringBuilder();
        s.append("dry run: nothing started\n");
        s.append("command: ").append(String.join(" ", quoted(launch.command(python, worker.resolve("plan.json"),
                worker.resolve("logs"), runId(recipe))))).append('\n');
        s.append("environment:\n");
        launch.environment(worker, !(recipe.hardware() instanceof Recipe.Hardware.Gpus),
                Runtime.getRuntime().availableProcessors()).forEach((k, v) -> s.append("  ").append(k).append('=')
                .append(v).append('\n'));
        s.append(String.format(Locale.ROOT, "world size: %d (%d node%s x %d process%s per node), this node's rank %d%n",
                launch.worldSize(), launch.nnodes(), launch.nnodes() == 1 ? "" : "s", launch.nprocPerNode(),
                launch.nprocPerNode() == 1 ? "" : "es", launch.nodeRank()));
        s.append(String.format(Locale.ROOT, "global batch: micro %d x ranks %d x accumulation %d = %d sequences per "
                + "optimizer step (%d micro batches)%n", micro, launch.worldSize(), accumulation,
                micro * perStep, perStep));
        s.append(String.format(Locale.ROOT, "global batch identity: step s trains on the micro batches at data "
                + "positions [%d*s, %d*s + %d) of the seed-%d order; rank r takes positions r, r+%d, ...; the loss is "
                + "divided by the target count of all %d%n", perStep, perStep, perStep, recipe.training().seed(),
                launch.worldSize(), perStep));
        return s.toString();
    }

    public static Result train(ValidatedRecipe validated, Settings settings) {
        Recipe recipe = validated.recipe();
        PrintWriter out = settings.out();
        Launch launch = settings.launch();
        requireRunnable(recipe);
        RewardChannel.requireAllowed(recipe, settings.allowCommands());
        Path modelDir = SingleDeviceBackend.localModel(recipe.model().baseModel());
        Path tokenizerDir = recipe.model().tokenizerConfig() != null
                ? SingleDeviceBackend.localModel(recipe.model().tokenizerConfig()) : modelDir;
        Path outputDir = Path.of(recipe.output().outputDir());
        Path workerFolder = outputDir.resolve(WorkerPlan.FOLDER);
        String python = WorkerPython.find(launch.python(), System.getenv(), System.getProperty("finetune.home"));
        WorkerPython.Environment environment = WorkerPython.check(python);
        boolean cpu = environment.cudaDevices() == 0;
        if (recipe.adapter() instanceof AdapterSpec.Lora lora && lora.quantized()) {
            throw new UserError("adapter", environment.bitsandbytes() == null || cpu
                    ? "QLoRA on the fsdp backend needs bitsandbytes on CUDA GPUs; " + python + " has "
                            + (cpu ? "no CUDA device" : "no bitsandbytes")
                    : "QLoRA on the fsdp backend is not in this build",
                    "use adapter: lora with backend: fsdp, or QLoRA with backend: single");
        }
        if (!cpu && launch.nprocPerNode() > environment.cudaDevices()) {
            throw new UserError("--nproc-per-node", launch.nprocPerNode() + " processes per node, but this node has "
                    + environment.cudaDevices() + " CUDA device(s)", "--nproc-per-node " + environment.cudaDevices());
        }
        out.printf(Locale.ROOT, "fsdp: %s (Python %s; torch %s, transformers %s, peft %s), %d rank%s on %s%n",
                environment.executable(), environment.python(), environment.packages().get("torch"),
                environment.packages().get("transformers"), environment.packages().get("peft"), launch.worldSize(),
                launch.worldSize() == 1 ? "" : "s", cpu ? "CPU (gloo)" : environment.cudaDevices() + " CUDA device(s)");

        // The first node owns output_dir as a single-device run does (OutputFolder): the quick answer now, the
        // claim under the OS lock once the data is packed (its batch count is part of the folder's recipe hash).
        boolean owner = launch.nodeRank() == 0;
        if (owner) {
            OutputFolder.check(outputDir, SingleDeviceBackend.inputs(validated), SingleDeviceBackend.resuming(recipe),
                    recipe.output().overwriteOutputDir());
        }
        if (recipe.objective() instanceof Recipe.Objective.Dpo && recipe.output().loraModelDir() != null) {
            out.printf(Locale.ROOT, "reference: the adapter from lora_model_dir %s, frozen as it starts (TRL's \"ref\" "
                    + "adapter; its log-probabilities are taken once before the first step); the policy starts equal "
                    + "to it%n", recipe.output().loraModelDir());
        }
        Preprocess.Prepared data = Preprocess.run(validated, out);
        try (OutputFolder claimed = owner ? claim(validated, data, launch, modelDir) : null) {
            // checked under the lock, before the ranks start: a damaged checkpoint is a message, not a traceback
            Path resumeFrom = owner ? WorkerCheckpoints.resumeFolder(recipe.output().resume(), outputDir) : null;
            WorkerPython.extract(workerFolder);
            WorkerPlan plan = WorkerPlan.write(recipe, data, launch, validated.plan(), modelDir, tokenizerDir,
                    resumeFrom);
            if (owner) {
                RunFiles.start(outputDir, validated, tokenizerDir);
            }
            out.printf(Locale.ROOT, "training: %d micro batches per epoch (as packed), %d optimizer steps of %d micro "
                    + "batches over %d rank%s, eval on %d micro batches%n", plan.microBatchesPerEpoch(),
                    plan.totalSteps(), plan.microBatchesPerStep(), launch.worldSize(), launch.worldSize() == 1 ? ""
                            : "s", data.evalBatches());

            List<String> command = launch.command(python, plan.planFile().toAbsolutePath(),
                    workerFolder.resolve("logs").toAbsolutePath(), runId(recipe));
            Map<String, String> env = new LinkedHashMap<>(launch.environment(workerFolder.toAbsolutePath(), cpu,
                    Runtime.getRuntime().availableProcessors()));
            // the ranks stop when this process is gone, however it went: no orphan writes into a folder whose lock
            // died with it
            env.put("FINETUNE_LAUNCHER_PID", Long.toString(ProcessHandle.current().pid()));
            Trainer.Run schedule = plan.run();
            try (RewardChannel rewards = RewardChannel.open(validated, tokenizerDir, settings.allowCommands())) {
                return rewards == null ? run(command, env, outputDir, launch, settings, schedule)
                        : rewards.around(env, ranks -> run(command, ranks, outputDir, launch, settings, schedule));
            }
        }
    }

    /** Takes output_dir for this run, with the same recipe hash the single-device run of this recipe would record. */
    private static OutputFolder claim(ValidatedRecipe validated, Preprocess.Prepared data, Launch launch,
            Path modelDir) {
        Recipe recipe = validated.recipe();
        Path outputDir = Path.of(recipe.output().outputDir());
        dev.finetune.trainers.train.Trainer.Run run = WorkerPlan.run(recipe,
                validated.plan().accumulation() * launch.worldSize(), data.trainBatches());
        Provenance provenance = Provenance.of(validated, validated.flatten(outputDir), modelDir.toString(), null);
        return OutputFolder.claim(new OutputFolder.Claim(outputDir, SingleDeviceBackend.inputs(validated),
                dev.finetune.trainers.train.ResumePoint.keys(run, data.trainBatches()),
                SingleDeviceBackend.resuming(recipe), recipe.output().overwriteOutputDir(), provenance.toJson()));
    }

    private static Result run(List<String> command, Map<String, String> env, Path outputDir, Launch launch,
            Settings settings, Trainer.Run schedule) {
        PrintWriter out = settings.out();
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        builder.environment().putAll(env);
        builder.environment().putAll(settings.environment());
        Process process;
        try {
            process = builder.start();
        } catch (IOException e) {
            throw new UserError("python", "cannot start torchrun: " + e.getMessage(), "check --python");
        }
        Run run = new Run(outputDir, launch, settings, schedule);
        // The JVM stopping (Ctrl-C, kill) takes every rank with it.
        Thread reaper = new Thread(() -> stopAll(process, run.pids));
        Runtime.getRuntime().addShutdownHook(reaper);
        try (BufferedReader lines = new BufferedReader(new InputStreamReader(process.getInputStream(),
                StandardCharsets.UTF_8))) {
            String line;
            while ((line = lines.readLine()) != null) {
                run.line(line);
            }
            process.waitFor();
        } catch (IOException e) {
            stopAll(process, run.pids);
            throw new IllegalStateException("lost the workers' output: " + e.getMessage(), e);
        } catch (InterruptedException e) {
            stopAll(process, run.pids);
            Thread.currentThread().interrupt();
            throw new WorkerFailed("interrupted; the ranks were stopped");
        } finally {
            run.close();
            try {
                Runtime.getRuntime().removeShutdownHook(reaper);
            } catch (IllegalStateException ignored) {
                // already shutting down: the hook runs anyway
            }
        }
        // torchrun stops the other ranks when one fails; whatever survived it is stopped here.
        int leftovers = stopAll(process, run.pids);
        if (process.exitValue() != 0 || run.error != null || !run.done) {
            String why = run.why(process.exitValue());
            throw new WorkerFailed(why + (leftovers > 0 ? " (" + leftovers + " leftover process(es) stopped)" : "")
                    + "; each rank's full output is in " + outputDir.resolve(WorkerPlan.FOLDER).resolve("logs"));
        }
        LossCurve.draw(outputDir.resolve(MetricsLog.FILE), outputDir);
        return new Result(outputDir, run.step, run.lastLoss, run.firstEval, run.lastEval, run.peaks, run.saved);
    }

    /** Stops torchrun and every rank still alive; returns how many ranks had to be stopped here. */
    static int stopAll(Process torchrun, List<Long> rankPids) {
        List<ProcessHandle> alive = new ArrayList<>(torchrun.descendants().toList());
        for (long pid : rankPids) {
            ProcessHandle.of(pid).filter(ProcessHandle::isAlive).ifPresent(h -> {
                if (!alive.contains(h)) {
                    alive.add(h);
                }
            });
        }
        int stopped = (int) alive.stream().filter(ProcessHandle::isAlive).count();
        alive.forEach(ProcessHandle::destroy);
        torchrun.destroy();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        for (ProcessHandle h : alive) {
            try {
                h.onExit().get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (Exception e) {
                h.destroyForcibly();
            }
        }
        if (torchrun.isAlive()) {
            torchrun.destroyForcibly();
        }
        return torchrun.exitValue() == 0 && stopped == 0 ? 0 : stopped;
    }

    private static String runId(Recipe recipe) {
        return "finetune-" + Integer.toHexString(Path.of(recipe.output().outputDir()).toAbsolutePath().hashCode());
    }

    private static List<String> quoted(List<String> command) {
        List<String> out = new ArrayList<>();
        for (String part : command) {
            out.add(part.matches("[A-Za-z0-9_./:=@%+,-]+") ? part : "'" + part.replace("'", "'\\''") + "'");
        }
        return out;
    }

    /** The state of one run as the ranks' lines arrive. */
    private static final class Run {
        private final Path outputDir;
        private final Launch launch;
        private final Settings settings;
        private final String host;
        private final List<Long> pids = new java.util.concurrent.CopyOnWriteArrayList<>();
        private final List<Map<String, Object>> peaks = new ArrayList<>();
        private final List<String> saved = new ArrayList<>();
        private final Trainer.Run schedule;
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
        private String error;
        private String torchrunFailure;
        private String killed;
        private String killedRank;
        private boolean done;
        private String failedRank;

        Run(Path outputDir, Launch launch, Settings settings, Trainer.Run schedule) {
            this.outputDir = outputDir;
            this.schedule = schedule;
            this.launch = launch;
            this.settings = settings;
            String name;
            try {
                name = InetAddress.getLocalHost().getHostName();
            } catch (IOException e) {
                name = "localhost";
            }
            this.host = name;
        }

        void line(String raw) {
            Matcher tee = TEE_PREFIX.matcher(raw);
            String text = raw;
            String who = "torchrun " + host;
            if (tee.matches()) {
                int rank = launch.nodeRank() * launch.nprocPerNode() + Integer.parseInt(tee.group(1));
                text = tee.group(2);
                who = "rank " + rank + " " + host;
            }
            if (text.startsWith("{")) {
                JsonObject event = parse(text);
                if (event != null && event.has("event")) {
                    event(event);
                    return;
                }
            }
            torchrunSummary(text);
            if (!text.isBlank() && !noise(text)) {
                settings.out().println("[" + who + "] " + text);
                settings.out().flush();
            }
        }

        private static boolean noise(String text) {
            return text.contains("Loading weights:") || text.startsWith("*****")
                    || text.contains("Setting OMP_NUM_THREADS environment variable");
        }

        /**
         * The root cause first: a rank that died of a signal torchrun did not send (a kill, an out-of-memory kill) and
         * said nothing, else the first rank that reported an error (the others' errors are usually their peers
         * vanishing), else what torchrun says.
         */
        String why(int exitCode) {
            if (killed != null && (error == null || !error.startsWith("rank " + killedRank + " "))) {
                return killed + (error != null ? " (then " + error + ")" : "");
            }
            if (error != null) {
                return error;
            }
            return torchrunFailure != null ? torchrunFailure
                    : "torchrun exited with " + exitCode + " before the run finished";
        }

        /**
         * torchrun's failure summary lists every failed rank with its exit code or signal. The ranks torchrun itself
         * stopped end with SIGTERM; the one that failed first is any other (its timestamps are whole seconds, so
         * torchrun's own "root cause" can name a rank it stopped).
         */
        private void torchrunSummary(String text) {
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
                    pids.add(event.get("pid").getAsLong());
                    out.printf(Locale.ROOT, "[%s] started, pid %d%n", who, event.get("pid").getAsLong());
                }
                case "start" -> {
                    step = event.get("step").getAsLong();
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
                    progress = Progress.forRun(step, total);
                    report = new EstimateReport(settings.plan(), out, total);
                }
                case "resumed" -> out.printf(Locale.ROOT, "[%s] resumed from %s at step %d (saved by %d rank(s))%n", who,
                        event.get("folder").getAsString(), event.get("step").getAsLong(),
                        event.get("saved_world_size").getAsInt());
                case "metrics" -> metrics(event.getAsJsonObject("metrics"));
                case "peak_memory" -> peaks(event);
                case "checkpoint" -> out.printf(Locale.ROOT, "[%s] saved %s%n", who, event.get("folder").getAsString());
                case "saved" -> event.getAsJsonArray("files").forEach(f -> saved.add(f.getAsString()));
                case "done" -> done = true;
                case "error" -> {
                    String message = event.get("message").getAsString();
                    // the whole traceback is printed below; the run's one-line error keeps to the point
                    message = message.length() > 400 ? message.substring(0, 400) + " ..." : message;
                    if (error == null) {
                        error = who + " failed: " + message;
                    }
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
                if (progress != null) {
                    progress.step(at, logged);
                }
            }
        }

        /**
         * Each rank's measured peak after the first optimizer step beside the plan's per-device estimate; the
         * largest goes into that step's metrics line under the single-device run's names.
         */
        private void peaks(JsonObject event) {
            String measuredAs = event.has("measured") ? event.get("measured").getAsString() : "resident set, VmHWM";
            long at = event.has("step") ? event.get("step").getAsLong() : step + 1;
            double largest = -1;
            for (JsonElement element : event.getAsJsonArray("ranks")) {
                JsonObject rank = element.getAsJsonObject();
                double mb = rank.get("peak_memory_mb").getAsDouble();
                Map<String, Object> peak = new LinkedHashMap<>();
                peak.put("rank", rank.get("rank").getAsInt());
                peak.put("host", rank.get("host").getAsString());
                peak.put("peak_memory_mb", mb);
                peaks.add(peak);
                String who = "[rank " + rank.get("rank").getAsInt() + " " + rank.get("host").getAsString() + "] ";
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
        }

        void close() {
            if (progress != null) {
                progress.close();
            }
            if (metrics != null) {
                try {
                    metrics.close();
                } catch (RuntimeException e) {
                    // the run's own error, if any, is the one to report
                }
            }
        }
    }
}
