package dev.finetune.cli;

import ai.djl.engine.Engine;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.bench.BenchShape;
import dev.finetune.trainers.bench.GemmPeak;
import dev.finetune.trainers.bench.TrainingBench;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * Benchmark: the trainer's step on the peer benchmark's shapes ({@link TrainingBench} says what it runs).
 *
 * <pre>
 * finetune bench-train --shape small --mode lora
 * finetune bench-train --shape medium --mode full --grad-ckpt
 * finetune bench-train --gemm-peak
 * finetune bench-train --shape tiny --mode full --wait-quiet 600
 * </pre>
 */
@Command(name = "bench-train", mixinStandardHelpOptions = true,
        description = {"Benchmark: training tokens/s, step time and peak memory on fixed model shapes.",
                "The shapes are the table shapes.tsv, which the peers in trainers/src/main/python/bench/peers.py train "
                        + "too. Run it alone on the machine; on busy cores compare builds by cpu_ms_per_step."})
final class BenchTrainCommand implements Callable<Integer> {

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

    @Option(names = "--bf16", description = "bfloat16 mixed precision, as a recipe's bf16: true (peers.py torch --autocast bf16).")
    boolean bfloat16;

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
            GemmPeak.measure(out);
            return ExitCode.OK;
        }
        BenchShape benchShape = parse(BenchShape.class, shape, "--shape");
        TrainingBench.Mode benchMode = parse(TrainingBench.Mode.class, mode, "--mode");
        int timed = steps != null ? steps : benchShape.steps;
        int warmup = warmupSteps != null ? warmupSteps : benchShape.warmupSteps;
        if (timed < 1 || warmup < 0) {
            throw new UserError("bench-train", "--steps must be >= 1 and --warmup-steps >= 0", "e.g. --steps 10 --warmup-steps 2");
        }
        TrainingBench.run(new TrainingBench.Settings(benchShape, benchMode, timed, warmup, gradientCheckpointing,
                profile, waitQuiet, bfloat16), out);
        return ExitCode.OK;
    }

    private static <E extends Enum<E>> E parse(Class<E> type, String value, String option) {
        for (E e : type.getEnumConstants()) {
            if (e.name().equalsIgnoreCase(value)) {
                return e;
            }
        }
        throw new UserError(option, "'" + value + "' is not one of "
                + Arrays.toString(type.getEnumConstants()).toLowerCase(Locale.ROOT), "e.g. " + option + " "
                + type.getEnumConstants()[0].name().toLowerCase(Locale.ROOT));
    }
}
