package dev.finetune.trainers.train;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Benchmark harness, not a test: prints resident memory ({@code VmRSS}) every 50 steps of a 500-step run of the
 * loop on a small toy network, with accumulation, evaluation, checkpoints and (argument {@code true})
 * recomputation, so a leak shows as a rising column. Run alone: {@code java -cp … LoopMemoryBench true}.
 */
public final class LoopMemoryBench {
    private LoopMemoryBench() {}

    public static void main(String[] args) throws IOException {
        boolean recompute = args.length > 0 && Boolean.parseBoolean(args[0]);
        int steps = args.length > 1 ? Integer.parseInt(args[1]) : 500;
        Engine.getInstance();
        Path dir = Files.createTempDirectory("loop-memory");
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 256, 64, 4, 0.1, true, 1);
            List<SftBatch> data = ToyData.batches(9, 4, 64, 256, 2);
            TestRuns options = TestRuns.in(dir).accumulation(2).maxSteps(steps)
                    .learningRate(1e-3).scheduler(LrScheduler.COSINE).warmupSteps(10)
                    .checkpointing(recompute).evalEvery(100).saveEvery(100).saveTotalLimit(1);
            long started = System.nanoTime();
            new Trainer<>(model, new SftObjective(), data.subList(0, 8), data.subList(8, 9), options.build(8), manager,
                    new Trainer.Listener() {
                        @Override
                        public void afterStep(long step, Map<String, Object> metrics) {
                            if (step > 0 && step % 50 == 0) {
                                System.out.printf(Locale.ROOT, "step %4d  VmRSS %7.1f MB  VmHWM %7.1f MB  loss %.4f  %.0f s%n",
                                        step, status("VmRSS:"), status("VmHWM:"), (double) metrics.get("loss"),
                                        (System.nanoTime() - started) / 1e9);
                            }
                        }
                    }).run();
        }
    }

    private static double status(String field) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith(field)) {
                    return Long.parseLong(line.substring(field.length()).trim().split("\\s+")[0]) / 1024.0;
                }
            }
        } catch (IOException e) {
            return Double.NaN;
        }
        return Double.NaN;
    }
}
