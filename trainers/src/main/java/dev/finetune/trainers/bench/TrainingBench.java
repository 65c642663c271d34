package dev.finetune.trainers.bench;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.Resume;
import dev.finetune.recipes.SchedulePlan;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.RandomWeights;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.Stream;

/**
 * Training throughput and peak memory on the {@link BenchShape} shapes, the model, step and data sizes the plain
 * torch peer ({@code trainers/src/main/python/bench/peers.py torch}) trains too, so the two can be read side by side.
 *
 * <p>The step is the trainer's own ({@link Trainer} with {@link SftObjective} on {@link LlamaTrainable}, AdamW,
 * constant learning rate, no clipping, no evaluation or checkpoints), fed random token rows whose labels are the
 * rows themselves, as the peer's shifted cross-entropy over every position. Run it alone: the engine's threads slow
 * down many times when other processes share the cores, so the last line carries {@code cpu_per_wall} (this
 * process's CPU seconds per wall second over the timed steps; about the thread count when undisturbed) and
 * {@code other_cpu} (the share of the machine other processes used meanwhile, as the peer reports it), and
 * {@code cpu_ms_per_step}, which other processes disturb less than wall time (the launcher sets passive OpenMP
 * waiting, so idle threads do not burn CPU) and so serves to compare two builds on busy cores.
 */
public final class TrainingBench {
    static final long SEED = 1234;
    private static final List<String> LORA_TARGETS =
            List.of("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj");

    public enum Mode { LORA, FULL }

    /**
     * @param steps timed steps
     * @param warmupSteps untimed steps first
     * @param profile where one more step's chrome trace goes, or {@code null} for none
     * @param waitQuiet seconds to wait at most for other processes to go quiet before training; 0 not to wait
     * @param bfloat16 bfloat16 mixed precision, as a recipe's {@code bf16: true} (the peer's {@code --autocast bf16})
     */
    public record Settings(BenchShape shape, Mode mode, int steps, int warmupSteps, boolean gradientCheckpointing,
            Path profile, double waitQuiet, boolean bfloat16) {}

    private TrainingBench() {}

    /** Trains, printing a line per step and then the summary line, in the peer's {@code key=value} form. */
    public static void run(Settings settings, PrintWriter out) throws IOException {
        BenchShape benchShape = settings.shape();
        Mode benchMode = settings.mode();
        String mode = benchMode.name().toLowerCase(Locale.ROOT);
        int timed = settings.steps();
        int warmup = settings.warmupSteps();
        Path profile = settings.profile();
        boolean gradientCheckpointing = settings.gradientCheckpointing();
        double lr = benchMode == Mode.FULL ? 1e-4 : 1e-3;
        Path outputDir = Files.createTempDirectory("bench-train");
        try (NDManager manager = NDManager.newBaseManager()) {
            ModelConfig config = benchShape.config();
            Map<String, NDArray> weights = RandomWeights.create(config, manager, SEED);
            LoadOptions load = benchMode == Mode.FULL
                    ? LoadOptions.fullFineTune()
                    : LoadOptions.adapters(new LoraFactory(
                            new AdapterSpec.Lora(8, 16, 0, LORA_TARGETS, false, false, null), manager, SEED));
            LlamaModel llama = LlamaModel.fromWeights(config, manager, weights, load);
            llama.setBfloat16Compute(settings.bfloat16());
            LlamaTrainable model = new LlamaTrainable(llama);
            long baseParams = weights.values().stream().mapToLong(NDArray::size).sum();
            long trainable = model.trainable().stream().mapToLong(p -> p.array().size()).sum();
            long params = benchMode == Mode.FULL ? baseParams : baseParams + trainable;
            long matmulParams = benchShape.matmulParams();
            out.printf(Locale.ROOT, "model params=%d trainable=%d matmul_params=%d mode=%s lr=%s threads=%d%n",
                    params, trainable, matmulParams, mode, lr, JniUtils.getNumThreads());
            out.flush();

            int total = warmup + timed + (profile != null ? 1 : 0);
            // constant learning rate, no clipping, no eval or checkpoints: only the step itself is measured
            Recipe.Training training = new Recipe.Training(benchShape.seq, false, false, benchShape.seq, false, 1, total, lr,
                    LrScheduler.CONSTANT, 0, 0, false, 0, null, Optimizer.ADAMW_TORCH, 0, 0.9, 0.999, 1e-8, 0,
                    gradientCheckpointing, SEED, true, null, 3);
            Trainer.Run run = new Trainer.Run(training, new SchedulePlan(1, total, total, total, 0, 0, 0, 1, false),
                    outputDir, 0, new Resume.Fresh(), Map.of(), false);
            if (settings.waitQuiet() > 0) {
                CpuCounters.waitUntilQuiet(settings.waitQuiet(), out);
            }
            StepTimes times = new StepTimes(warmup, timed, benchShape.batch * benchShape.seq, profile, out);
            new Trainer<>(model, new SftObjective(), randomRows(benchShape, total), List.of(), run,
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
                            + "loss_first=%.4f loss_last=%.4f threads=%d cpu_per_wall=%.2f other_cpu=%.2f cpu_ms_per_step=%.1f omp_wait_policy=%s "
                            + "compute=%s%n",
                    tokensPerSecond, tokensPerStep / median, median * 1e3, sorted[0] * 1e3,
                    sorted[sorted.length - 1] * 1e3, times.peakMegabytes(), params, trainable, matmulParams,
                    flopsPerToken, tokensPerSecond * flopsPerToken / 1e9, attentionFlopsPerToken,
                    tokensPerSecond * (flopsPerToken + attentionFlopsPerToken) / 1e9, mode,
                    gradientCheckpointing ? 1 : 0, benchShape.vocab, benchShape.dim, benchShape.layers, benchShape.heads,
                    benchShape.kvHeads, benchShape.ffn, benchShape.seq, benchShape.batch, seconds.length,
                    times.firstLoss(), times.lastLoss(), JniUtils.getNumThreads(), times.cpuPerWall(), times.otherCpu(),
                    times.cpuMillisPerStep(), System.getenv().getOrDefault("OMP_WAIT_POLICY", "default"),
                    llama.bfloat16Compute() ? "bf16" : "fp32");
            out.flush();
        } finally {
            try (Stream<Path> files = Files.walk(outputDir)) {
                for (Path p : files.sorted(Comparator.reverseOrder()).toList()) {
                    Files.deleteIfExists(p);
                }
            }
        }
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

    static double median(double[] sorted) {
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
}
