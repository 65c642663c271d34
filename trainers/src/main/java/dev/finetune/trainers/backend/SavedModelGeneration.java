package dev.finetune.trainers.backend;

import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.io.SafetensorsReader;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.backend.fsdp.WorkerGeneration;
import dev.finetune.trainers.generation.Completion;
import dev.finetune.trainers.generation.GenerationSettings;
import dev.finetune.trainers.generation.Generator;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.train.output.PeakMemory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.logging.log4j.LogManager;

/**
 * {@code finetune generate} on a saved model (a model folder, a merged one, or a LoRA output_dir): the engine chosen
 * once ({@link ResolvedRun#forGeneration}) and one call that runs it, so the command and the tests that compare its
 * numbers with PEFT's go through the same path. The in-JVM model runs the families it implements; the torch worker
 * ({@link WorkerGeneration}) runs every other family transformers builds, with the same loop and sampler.
 */
public final class SavedModelGeneration {
    private SavedModelGeneration() {}

    /** The engine that generates with {@code dir}, from its (or its base's) {@code config.json}. */
    public static ResolvedRun engine(Path dir) {
        return ResolvedRun.forGeneration(SavedModels.config(dir));
    }

    /**
     * One completion per prompt, in order, from the engine {@code engine} names.
     *
     * @param python the interpreter the worker runs on (used only when the engine is the worker)
     */
    public static List<Completion> generate(Path dir, ResolvedRun engine, List<long[]> prompts,
            GenerationSettings settings, String python) {
        if (engine.backend() == ResolvedRun.Backend.SINGLE) {
            try (NDManager manager = NDManager.newBaseManager()) {
                long started = System.nanoTime();
                LlamaModel model = SavedModels.load(dir, manager);
                // Looked up here, not in a static field: initialising Log4j costs a fifth of a second
                LogManager.getLogger(SavedModelGeneration.class).info(String.format("loaded %s: %.1f MiB of float32 "
                        + "weights in %.2f s, peak resident memory %.1f MiB", dir, model.weightBytes() / (1024.0 * 1024.0),
                        (System.nanoTime() - started) / 1e9, PeakMemory.megabytes()));
                return new Generator(model).generate(prompts, settings);
            }
        }
        boolean adapter = SavedModels.isAdapter(dir);
        Path base = SavedModels.architectureDir(dir);
        // the files the worker will look for, checked here: a missing one is bad input, not a failed worker
        SafetensorsReader.open(base).close();
        if (adapter && !Files.isRegularFile(dir.resolve(AdapterFiles.WEIGHTS_FILE))) {
            throw new UserError(dir.toString(), "no " + AdapterFiles.WEIGHTS_FILE + " beside adapter_config.json",
                    "give a complete adapter folder (a LoRA run's output_dir or one of its checkpoint-N folders)");
        }
        return WorkerGeneration.generate(python, base, adapter ? dir : null, prompts, settings);
    }
}
