package dev.finetune.trainers.bench;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.PlainProjection;
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

/**
 * Load memory and generation speed, with and without the KV cache. Each figure line carries {@code cpu_per_wall}
 * (process CPU seconds per wall second; about the thread count when undisturbed): run it alone, the engine's threads
 * slow down many times when other processes share the cores.
 */
public final class GenerationBench {

    /**
     * @param owned copy weights into engine memory instead of mapping the file (what training does)
     * @param skipRecompute only time the cached path
     * @param repeat cached generations, each followed by the peak resident memory (a leak keeps raising it)
     */
    public record Settings(Path modelDir, int batch, int promptTokens, int newTokens, boolean owned,
            boolean skipRecompute, int repeat) {}

    private GenerationBench() {}

    public static void run(Settings s, PrintWriter out) {
        try (NDManager manager = NDManager.newBaseManager()) {
            manager.ones(new Shape(4)).sum().getFloat();
            double baseline = PeakMemory.megabytes();
            long started = System.nanoTime();
            LlamaModel model = LlamaModel.load(s.modelDir(), manager,
                    s.owned() ? LoadOptions.adapters(PlainProjection.frozenFactory()) : LoadOptions.inference());
            double loadSeconds = (System.nanoTime() - started) / 1e9;
            double afterLoad = PeakMemory.megabytes();
            long weights = model.weightBytes();
            Generator generator = new Generator(model);
            List<long[]> prompts = prompts(s, model.config().vocabSize());
            GenerationSettings settings = GenerationSettings.greedy(s.newTokens());
            generator.generate(prompts, GenerationSettings.greedy(4));
            double afterFirstUse = PeakMemory.megabytes();
            double weightMiB = weights / (1024.0 * 1024.0);
            out.printf("model=%s weights=%s params=%d f32_weight_mib=%.1f load_s=%.3f baseline_hwm_mib=%.1f hwm_after_load_mib=%.1f "
                            + "hwm_after_first_generate_mib=%.1f (hwm-baseline)/weights=%.3f%n",
                    s.modelDir().getFileName(), s.owned() ? "owned" : "mapped", weights / 4, weightMiB, loadSeconds, baseline,
                    afterLoad, afterFirstUse, (afterFirstUse - baseline) / weightMiB);
            out.flush();
            for (int r = 0; r < s.repeat(); r++) {
                time(out, s, "cached", () -> generator.generate(prompts, settings));
                out.printf("hwm_mib=%.1f%n", PeakMemory.megabytes());
            }
            if (!s.skipRecompute()) {
                time(out, s, "recompute", () -> generator.generateWithoutCache(prompts, settings));
            }
        }
    }

    /** A random model of the {@link BenchShape#MEDIUM} shape in Hugging Face layout, to load in a fresh process. */
    public static void writeRandomModel(Path dir) throws IOException {
        Files.createDirectories(dir);
        BenchShape medium = BenchShape.MEDIUM;
        Files.writeString(dir.resolve("config.json"), medium.configJson());
        ModelConfig config = medium.config();
        try (NDManager manager = NDManager.newBaseManager()) {
            List<NamedArray> tensors = new ArrayList<>();
            RandomWeights.create(config, manager, TrainingBench.SEED).forEach((n, a) -> tensors.add(new NamedArray(n, a)));
            SafetensorsWriter.write(dir.resolve("model.safetensors"), tensors, SafetensorsDtype.F32, Map.of("format", "pt"));
        }
    }

    private static void time(PrintWriter out, Settings s, String label, Runnable run) {
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpu = os.getProcessCpuTime();
        long wall = System.nanoTime();
        run.run();
        double seconds = (System.nanoTime() - wall) / 1e9;
        double cpuSeconds = (os.getProcessCpuTime() - cpu) / 1e9;
        out.printf("%s batch=%d prompt_tokens=%d new_tokens=%d seconds=%.3f tokens_per_s=%.1f cpu_per_wall=%.2f%n", label,
                s.batch(), s.promptTokens(), s.newTokens(), seconds, s.batch() * s.newTokens() / seconds, cpuSeconds / seconds);
        out.flush();
    }

    private static List<long[]> prompts(Settings s, int vocabulary) {
        SplittableRandom random = new SplittableRandom(42);
        List<long[]> prompts = new ArrayList<>();
        for (int b = 0; b < s.batch(); b++) {
            long[] ids = new long[s.promptTokens()];
            ids[0] = 1;
            for (int i = 1; i < ids.length; i++) {
                ids[i] = random.nextInt(3, vocabulary);
            }
            prompts.add(ids);
        }
        return prompts;
    }
}
