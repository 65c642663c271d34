package dev.finetune.cli;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.jni.JniUtils;
import com.google.gson.JsonParser;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.RandomWeights;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.TrainingOptions;
import dev.finetune.trainers.train.optim.LrSchedule;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * Hidden benchmark: training throughput and peak memory on the shapes and settings of
 * {@code shared/bench/peer_torch.py}, so the two can be read side by side.
 *
 * <pre>
 * finetune bench-train --shape small --mode lora
 * finetune bench-train --shape medium --mode full --grad-ckpt
 * finetune bench-train --gemm-peak
 * finetune bench-train --shape tiny --mode full --wait-quiet 600
 * </pre>
 *
 * The step is the trainer's own ({@link Trainer} with {@link SftObjective} on {@link LlamaTrainable}, AdamW,
 * constant learning rate, no clipping, no evaluation or checkpoints), fed random token rows whose labels are the
 * rows themselves, as the peer's shifted cross-entropy over every position. Run it alone: the engine's threads slow
 * down many times when other processes share the cores, so the last line carries {@code cpu_per_wall} (this
 * process's CPU seconds per wall second over the timed steps; about the thread count when undisturbed) and
 * {@code other_cpu} (the share of the machine other processes used meanwhile, as the peer reports it), and
 * {@code cpu_ms_per_step}, which other processes disturb less than wall time (the launcher sets passive OpenMP
 * waiting, so idle threads do not burn CPU) and so serves to compare two builds on busy cores.
 */
@Command(name = "bench-train", hidden = true, mixinStandardHelpOptions = true,
        description = "Measure training tokens/s, step time and peak memory on the peer benchmark's shapes.")
final class BenchTrainCommand implements Callable<Integer> {
    private static final long SEED = 1234;
    private static final List<String> LORA_TARGETS =
            List.of("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj");

    /** The peer's TINY, SMALL and MEDIUM, with its default timed and warm-up step counts. */
    enum BenchShape {
        TINY(512, 64, 5, 8, 4, 172, 256, 8, 30, 3),
        SMALL(4096, 256, 4, 4, 4, 688, 256, 8, 12, 2),
        MEDIUM(32000, 512, 8, 8, 8, 1376, 512, 4, 6, 1);

        final int vocab;
        final int dim;
        final int layers;
        final int heads;
        final int kvHeads;
        final int ffn;
        final int seq;
        final int batch;
        final int steps;
        final int warmupSteps;

        BenchShape(int vocab, int dim, int layers, int heads, int kvHeads, int ffn, int seq, int batch, int steps,
                int warmupSteps) {
            this.vocab = vocab;
            this.dim = dim;
            this.layers = layers;
            this.heads = heads;
            this.kvHeads = kvHeads;
            this.ffn = ffn;
            this.seq = seq;
            this.batch = batch;
            this.steps = steps;
            this.warmupSteps = warmupSteps;
        }

        /** The shape as a Hugging Face {@code config.json}, so a random model of it can also be saved and loaded. */
        String configJson() {
            return String.format(Locale.ROOT, """
                    {"model_type": "llama", "vocab_size": %d, "hidden_size": %d, "num_hidden_layers": %d,
                     "num_attention_heads": %d, "num_key_value_heads": %d, "intermediate_size": %d,
                     "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": %d,
                     "tie_word_embeddings": false, "torch_dtype": "float32"}""",
                    vocab, dim, layers, heads, kvHeads, ffn, Math.max(seq, 2048));
        }

        ModelConfig config() {
            return ModelConfig.fromJson(JsonParser.parseString(configJson()).getAsJsonObject(), name().toLowerCase(Locale.ROOT));
        }

        /** Weights of every matmul (decoder projections and head), the peer's {@code matmul_params}. */
        long matmulParams() {
            long headDim = dim / heads;
            long perLayer = 2L * dim * heads * headDim + 2L * dim * kvHeads * headDim + 3L * dim * ffn;
            return perLayer * layers + (long) dim * vocab;
        }
    }

    enum Mode { LORA, FULL }

    @Spec
    CommandSpec spec;

    @Option(names = "--shape", defaultValue = "tiny", description = "tiny | small | medium")
    String shape;

    @Option(names = "--mode", defaultValue = "lora", description = "lora (r 8, alpha 16 on q,k,v,o,gate,up,down) | full")
    String mode;

    @Option(names = "--steps", description = "Timed steps (default: the peer's for the shape).")
    Integer steps;

    @Option(names = "--warmup-steps", description = "Untimed steps first (default: the peer's for the shape).")
    Integer warmupSteps;

    @Option(names = "--grad-ckpt", description = "Recompute each decoder layer in the backward pass.")
    boolean gradientCheckpointing;

    @Option(names = "--threads", description = "Engine intra-op threads (default: the engine's, one per core).")
    Integer threads;

    @Option(names = "--wait-quiet", paramLabel = "SECONDS", defaultValue = "0",
            description = "Before training, wait up to SECONDS until other processes use under 10%% of the machine (as the peer's option).")
    double waitQuiet;

    @Option(names = "--profile", paramLabel = "FILE",
            description = "After the timed steps, run one more under the engine's profiler and write its chrome trace to FILE.")
    Path profile;

    @Option(names = "--gemm-peak", description = "Only measure the engine's float32 GEMM ceiling (2048³ matMul, median of 10).")
    boolean gemmPeak;

    @Override
    public Integer call() throws IOException {
        PrintWriter out = spec.commandLine().getOut();
        Engine.getInstance();
        if (threads != null) {
            // Only after the engine is loaded: earlier the native library is not there to take it.
            JniUtils.setNumThreads(threads);
        }
        if (gemmPeak) {
            measureGemmPeak(out);
            return Main.OK;
        }
        BenchShape benchShape = parse(BenchShape.class, shape, "--shape");
        Mode benchMode = parse(Mode.class, mode, "--mode");
        int timed = steps != null ? steps : benchShape.steps;
        int warmup = warmupSteps != null ? warmupSteps : benchShape.warmupSteps;
        if (timed < 1 || warmup < 0) {
            throw new dev.finetune.recipes.UserError("bench-train", "--steps must be >= 1 and --warmup-steps >= 0",
                    "e.g. --steps 10 --warmup-steps 2");
        }
        double lr = benchMode == Mode.FULL ? 1e-4 : 1e-3;
        Path outputDir = Files.createTempDirectory("bench-train");
        try (NDManager manager = NDManager.newBaseManager()) {
            ModelConfig config = benchShape.config();
            Map<String, NDArray> weights = RandomWeights.create(config, manager, SEED);
            LoadOptions load = benchMode == Mode.FULL
                    ? LoadOptions.fullFineTune()
                    : LoadOptions.adapters(new LoraFactory(
                            new AdapterSpec.Lora(8, 16, 0, LORA_TARGETS, false, false, null), manager, SEED));
            LlamaTrainable model = new LlamaTrainable(LlamaModel.fromWeights(config, manager, weights, load));
            long baseParams = weights.values().stream().mapToLong(NDArray::size).sum();
            long trainable = model.trainable().stream().mapToLong(p -> p.array().size()).sum();
            long params = benchMode == Mode.FULL ? baseParams : baseParams + trainable;
            long matmulParams = benchShape.matmulParams();
            out.printf(Locale.ROOT, "model params=%d trainable=%d matmul_params=%d mode=%s lr=%s threads=%d%n",
                    params, trainable, matmulParams, mode, lr, JniUtils.getNumThreads());
            out.flush();

            int total = warmup + timed + (profile != null ? 1 : 0);
            TrainingOptions options = TrainingOptions.builder(outputDir).maxSteps(total).learningRate(lr)
                    .lrScheduler(LrSchedule.CONSTANT).weightDecay(0).adamBeta1(0.9).adamBeta2(0.999).adamEpsilon(1e-8)
                    .maxGradNorm(0).gradientCheckpointing(gradientCheckpointing).seed(SEED).build();
            if (waitQuiet > 0) {
                waitUntilQuiet(waitQuiet, out);
            }
            StepTimes times = new StepTimes(warmup, timed, benchShape.batch * benchShape.seq, profile, out);
            new Trainer<>(model, new SftObjective(), randomRows(benchShape, total), List.of(), options,
                    manager, times).run();

            long tokensPerStep = (long) benchShape.batch * benchShape.seq;
            double[] seconds = times.timedSeconds();
            double timedTotal = Arrays.stream(seconds).sum();
            double[] sorted = seconds.clone();
            Arrays.sort(sorted);
            double median = median(sorted);
            double tokensPerSecond = tokensPerStep * seconds.length / timedTotal;
            long flopsPerToken = benchMode == Mode.FULL ? 6 * matmulParams : 4 * matmulParams + 6 * trainable;
            long attentionFlopsPerToken = 12L * benchShape.layers * benchShape.seq * benchShape.dim;
            out.printf(Locale.ROOT, "finetune tokens_per_s=%.1f tokens_per_s_median=%.1f step_ms_median=%.1f "
                            + "step_ms_min=%.1f step_ms_max=%.1f peak_rss_mb=%.1f params=%d trainable=%d matmul_params=%d "
                            + "flops_per_token=%d gflops=%.1f attn_flops_per_token=%d gflops_with_attn=%.1f mode=%s "
                            + "grad_ckpt=%d vocab=%d dim=%d layers=%d heads=%d kv_heads=%d ffn=%d seq=%d batch=%d steps=%d "
                            + "loss_first=%.4f loss_last=%.4f threads=%d cpu_per_wall=%.2f other_cpu=%.2f cpu_ms_per_step=%.1f omp_wait_policy=%s%n",
                    tokensPerSecond, tokensPerStep / median, median * 1e3, sorted[0] * 1e3,
                    sorted[sorted.length - 1] * 1e3, times.peakMegabytes(), params, trainable, matmulParams,
                    flopsPerToken, tokensPerSecond * flopsPerToken / 1e9, attentionFlopsPerToken,
                    tokensPerSecond * (flopsPerToken + attentionFlopsPerToken) / 1e9, mode,
                    gradientCheckpointing ? 1 : 0, benchShape.vocab, benchShape.dim, benchShape.layers, benchShape.heads,
                    benchShape.kvHeads, benchShape.ffn, benchShape.seq, benchShape.batch, seconds.length,
                    times.firstLoss(), times.lastLoss(), JniUtils.getNumThreads(), times.cpuPerWall(), times.otherCpu(),
                    times.cpuMillisPerStep(), System.getenv().getOrDefault("OMP_WAIT_POLICY", "default"));
            out.flush();
        } finally {
            try (Stream<Path> files = Files.walk(outputDir)) {
                for (Path p : files.sorted(Comparator.reverseOrder()).toList()) {
                    Files.deleteIfExists(p);
                }
            }
        }
        return Main.OK;
    }

    /** Random rows, the same seed every run; labels are the rows (the loss predicts each next token). */
    private static List<SftBatch> randomRows(BenchShape s, int count) {
        SplittableRandom random = new SplittableRandom(SEED + 1);
        int cells = s.batch * s.seq;
        List<SftBatch> batches = new ArrayList<>(count);
        for (int b = 0; b < count; b++) {
            long[] ids = new long[cells];
            long[] positions = new long[cells];
            long[] segments = new long[cells];
            for (int i = 0; i < cells; i++) {
                ids[i] = random.nextInt(s.vocab);
                positions[i] = i % s.seq;
                segments[i] = 1;
            }
            batches.add(new SftBatch(s.batch, s.seq, ids, positions, segments, ids.clone()));
        }
        return batches;
    }

    /**
     * Takes each step's time from the trainer's own measurement (its tokens/s over the step's tokens), so it
     * covers exactly the optimizer step; CPU and machine counters start after the last warm-up step.
     */
    private static final class StepTimes implements Trainer.Listener {
        private final int warmup;
        private final int timedSteps;
        private final long tokensPerStep;
        private final Path profile;
        private final PrintWriter out;
        private final List<Double> timed = new ArrayList<>();
        private double firstLoss = Double.NaN;
        private double lastLoss = Double.NaN;
        private double peakMegabytes = Double.NaN;
        private CpuCounters start;
        private CpuCounters end;

        StepTimes(int warmup, int timedSteps, long tokensPerStep, Path profile, PrintWriter out) {
            this.warmup = warmup;
            this.timedSteps = timedSteps;
            this.tokensPerStep = tokensPerStep;
            this.profile = profile;
            this.out = out;
            if (warmup == 0) {
                start = CpuCounters.now();
            }
        }

        @Override
        public void afterStep(long step, Map<String, Object> metrics) {
            double seconds = tokensPerStep / (double) metrics.get("tokens_per_second");
            double loss = (double) metrics.get("loss");
            if (step > warmup + timedSteps) {
                JniUtils.stopProfile(profile.toString());
                out.printf(Locale.ROOT, "profiled step %d ms=%.1f trace=%s%n", step - 1, seconds * 1e3, profile);
                out.flush();
                return;
            }
            boolean isTimed = step > warmup;
            if (step == 1) {
                firstLoss = loss;
            }
            lastLoss = loss;
            if (isTimed) {
                timed.add(seconds);
                end = CpuCounters.now();
                peakMegabytes = (double) metrics.get("peak_memory_mb");
            }
            out.printf(Locale.ROOT, "step %d %s ms=%.1f loss=%.4f%n", step - 1, isTimed ? "timed" : "warmup",
                    seconds * 1e3, loss);
            out.flush();
            if (step == warmup) {
                start = CpuCounters.now();
            }
            if (profile != null && step == warmup + timedSteps) {
                JniUtils.startProfile(false, true, true);
            }
        }

        double[] timedSeconds() {
            return timed.stream().mapToDouble(Double::doubleValue).toArray();
        }

        double firstLoss() {
            return firstLoss;
        }

        double lastLoss() {
            return lastLoss;
        }

        double peakMegabytes() {
            return peakMegabytes;
        }

        double cpuPerWall() {
            return start.cpuPerWallUntil(end);
        }

        double otherCpu() {
            return CpuCounters.otherShare(start, end);
        }

        /** This process's CPU time per timed step: less disturbed by other processes than wall time. */
        double cpuMillisPerStep() {
            return (end.processNanos - start.processNanos) / 1e6 / timed.size();
        }
    }

    /** This process's CPU time, the machine's busy and steal time from {@code /proc/stat}, and the wall clock. */
    private record CpuCounters(long processNanos, long machineBusyTicks, long wallNanos) {
        private static final long TICKS_PER_SECOND = 100; // USER_HZ, fixed at 100 on Linux

        static CpuCounters now() {
            var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
            return new CpuCounters(os.getProcessCpuTime(), readMachineBusyTicks(), System.nanoTime());
        }

        /** user + nice + system + irq + softirq + steal of all cores; -1 where /proc is missing. */
        private static long readMachineBusyTicks() {
            try {
                String[] f = Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
                long busy = 0;
                for (int i : new int[] {1, 2, 3, 6, 7, 8}) {
                    busy += i < f.length ? Long.parseLong(f[i]) : 0;
                }
                return busy;
            } catch (IOException | RuntimeException e) {
                return -1;
            }
        }

        double cpuPerWallUntil(CpuCounters later) {
            return (later.processNanos - processNanos) / (double) (later.wallNanos - wallNanos);
        }

        /** Share of the machine's capacity used by other processes (and stolen) between two readings. */
        static double otherShare(CpuCounters a, CpuCounters b) {
            if (a.machineBusyTicks < 0 || b.machineBusyTicks < 0) {
                return Double.NaN;
            }
            double wallSeconds = (b.wallNanos - a.wallNanos) / 1e9;
            double capacityTicks = wallSeconds * TICKS_PER_SECOND * Runtime.getRuntime().availableProcessors();
            double ownTicks = (b.processNanos - a.processNanos) / 1e9 * TICKS_PER_SECOND;
            return Math.max(0, (b.machineBusyTicks - a.machineBusyTicks) - ownTicks) / capacityTicks;
        }
    }

    /** fp32 {@code 2048×2048 · 2048×2048} through the engine, the same measurement as the peer's {@code gemm_peak.py}. */
    private static void measureGemmPeak(PrintWriter out) {
        int n = 2048;
        int runs = 10;
        double[] seconds = new double[runs];
        CpuCounters start;
        CpuCounters end;
        try (NDManager manager = NDManager.newBaseManager()) {
            Engine.getInstance().setRandomSeed((int) SEED);
            NDArray a = manager.randomNormal(new Shape(n, n));
            NDArray b = manager.randomNormal(new Shape(n, n));
            for (int i = 0; i < 2; i++) {
                try (NDScope scope = new NDScope()) {
                    a.matMul(b);
                }
            }
            start = CpuCounters.now();
            for (int i = 0; i < runs; i++) {
                try (NDScope scope = new NDScope()) {
                    long t0 = System.nanoTime();
                    a.matMul(b);
                    seconds[i] = (System.nanoTime() - t0) / 1e9;
                }
            }
            end = CpuCounters.now();
        }
        double[] sorted = seconds.clone();
        Arrays.sort(sorted);
        double flops = 2.0 * n * n * n;
        out.printf(Locale.ROOT, "finetune gemm_peak_gflops=%.1f n=%d runs=%d gflops_max=%.1f gflops_min=%.1f threads=%d "
                        + "cpu_per_wall=%.2f other_cpu=%.2f%n",
                flops / median(sorted) / 1e9, n, runs, flops / sorted[0] / 1e9, flops / sorted[runs - 1] / 1e9,
                JniUtils.getNumThreads(), start.cpuPerWallUntil(end), CpuCounters.otherShare(start, end));
        out.flush();
    }

    /** Polls in 2-second windows until other processes use under 10% of the machine, or gives up after {@code seconds}. */
    private static void waitUntilQuiet(double seconds, PrintWriter out) {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        while (true) {
            CpuCounters before = CpuCounters.now();
            try {
                Thread.sleep(2000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
            double others = CpuCounters.otherShare(before, CpuCounters.now());
            if (!(others >= 0.10)) {
                return;
            }
            if (System.nanoTime() > deadline) {
                out.printf(Locale.ROOT, "wait_quiet: gave up after %.0f s (others %.0f%%)%n", seconds, others * 100);
                out.flush();
                return;
            }
        }
    }

    private static double median(double[] sorted) {
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    private static <E extends Enum<E>> E parse(Class<E> type, String value, String option) {
        for (E e : type.getEnumConstants()) {
            if (e.name().equalsIgnoreCase(value)) {
                return e;
            }
        }
        throw new dev.finetune.recipes.UserError(option, "'" + value + "' is not one of "
                + Arrays.toString(type.getEnumConstants()).toLowerCase(Locale.ROOT), "e.g. " + option + " "
                + type.getEnumConstants()[0].name().toLowerCase(Locale.ROOT));
    }
}
