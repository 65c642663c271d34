package dev.finetune.cli;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.io.SafetensorsDtype;
import dev.finetune.adapters.io.SafetensorsWriter;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.trainers.generation.GenerationSettings;
import dev.finetune.trainers.generation.Generator;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.RandomWeights;
import dev.finetune.trainers.train.output.PeakMemory;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * Hidden benchmark: load memory and generation speed, with and without the KV cache.
 *
 * <pre>
 * finetune bench-generate --save-random /tmp/medium   # vocab 32000, dim 512, 8 layers, 8 heads, ffn 1376 (the peer bench's MEDIUM)
 * finetune bench-generate /tmp/medium                 # then measure in a fresh process
 * finetune bench-generate configs/models/stories260K
 * </pre>
 *
 * Run it alone: the engine's threads slow down many times when other processes share the cores. Each figure line
 * carries {@code cpu_per_wall} (process CPU seconds per wall second; about the thread count when undisturbed).
 */
@Command(name = "bench-generate", hidden = true, mixinStandardHelpOptions = true,
        description = "Measure load memory and generation tokens/s (cached vs full recompute).")
final class BenchGenerateCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Parameters(index = "0", arity = "0..1", paramLabel = "MODEL_DIR")
    Path modelDir;

    @Option(names = "--save-random", paramLabel = "DIR", description = "Write a random model of the medium bench shape to DIR and exit.")
    Path saveRandom;

    @Option(names = "--batch", defaultValue = "1")
    int batch;

    @Option(names = "--prompt-tokens", defaultValue = "16")
    int promptTokens;

    @Option(names = "--new-tokens", defaultValue = "128")
    int newTokens;

    @Option(names = "--owned", description = "Copy weights into engine memory instead of mapping the file (what training does).")
    boolean owned;

    @Option(names = "--skip-recompute", description = "Only time the cached path.")
    boolean skipRecompute;

    @Option(names = "--repeat", defaultValue = "1", description = "Run the cached generation this many times, printing peak resident memory after each (a leak keeps raising it).")
    int repeat;

    @Override
    public Integer call() throws IOException {
        PrintWriter out = spec.commandLine().getOut();
        if (saveRandom != null) {
            writeRandom(saveRandom);
            out.println("wrote " + saveRandom);
            return Main.OK;
        }
        if (modelDir == null) {
            throw new dev.finetune.recipes.UserError("bench-generate", "give MODEL_DIR or --save-random DIR", "see --help");
        }
        try (NDManager manager = NDManager.newBaseManager()) {
            manager.ones(new Shape(4)).sum().getFloat();
            double baseline = PeakMemory.megabytes();
            long started = System.nanoTime();
            LlamaModel model = LlamaModel.load(modelDir, manager,
                    owned ? LoadOptions.adapters(dev.finetune.adapters.PlainProjection.frozenFactory()) : LoadOptions.inference());
            double loadSeconds = (System.nanoTime() - started) / 1e9;
            double afterLoad = PeakMemory.megabytes();
            long weights = model.weightBytes();
            Generator generator = new Generator(model);
            List<long[]> prompts = prompts(model.config().vocabSize());
            GenerationSettings settings = GenerationSettings.greedy(newTokens);
            generator.generate(prompts, GenerationSettings.greedy(4));
            double afterFirstUse = PeakMemory.megabytes();
            double weightMiB = weights / (1024.0 * 1024.0);
            out.printf("model=%s weights=%s params=%d f32_weight_mib=%.1f load_s=%.3f baseline_hwm_mib=%.1f hwm_after_load_mib=%.1f "
                            + "hwm_after_first_generate_mib=%.1f (hwm-baseline)/weights=%.3f%n",
                    modelDir.getFileName(), owned ? "owned" : "mapped", weights / 4, weightMiB, loadSeconds, baseline, afterLoad,
                    afterFirstUse, (afterFirstUse - baseline) / weightMiB);
            out.flush();
            for (int r = 0; r < repeat; r++) {
                time(out, "cached", () -> generator.generate(prompts, settings));
                out.printf("hwm_mib=%.1f%n", PeakMemory.megabytes());
            }
            if (!skipRecompute) {
                time(out, "recompute", () -> generator.generateWithoutCache(prompts, settings));
            }
        }
        return Main.OK;
    }

    private void time(PrintWriter out, String label, Runnable run) {
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpu = os.getProcessCpuTime();
        long wall = System.nanoTime();
        run.run();
        double seconds = (System.nanoTime() - wall) / 1e9;
        double cpuSeconds = (os.getProcessCpuTime() - cpu) / 1e9;
        out.printf("%s batch=%d prompt_tokens=%d new_tokens=%d seconds=%.3f tokens_per_s=%.1f cpu_per_wall=%.2f%n", label, batch,
                promptTokens, newTokens, seconds, batch * newTokens / seconds, cpuSeconds / seconds);
        out.flush();
    }

    private List<long[]> prompts(int vocabulary) {
        SplittableRandom random = new SplittableRandom(42);
        List<long[]> prompts = new ArrayList<>();
        for (int b = 0; b < batch; b++) {
            long[] ids = new long[promptTokens];
            ids[0] = 1;
            for (int i = 1; i < ids.length; i++) {
                ids[i] = random.nextInt(3, vocabulary);
            }
            prompts.add(ids);
        }
        return prompts;
    }

    private static void writeRandom(Path dir) throws IOException {
        Files.createDirectories(dir);
        BenchTrainCommand.BenchShape medium = BenchTrainCommand.BenchShape.MEDIUM;
        Files.writeString(dir.resolve("config.json"), medium.configJson());
        ModelConfig config = medium.config();
        try (NDManager manager = NDManager.newBaseManager()) {
            List<NamedArray> tensors = new ArrayList<>();
            RandomWeights.create(config, manager, 1234).forEach((n, a) -> tensors.add(new NamedArray(n, a)));
            SafetensorsWriter.write(dir.resolve("model.safetensors"), tensors, SafetensorsDtype.F32, Map.of("format", "pt"));
        }
    }
}
