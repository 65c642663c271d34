package dev.finetune.trainers.backend;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.io.SafetensorsDtype;
import dev.finetune.adapters.io.SafetensorsWriter;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.adapters.peft.AdapterWeights;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.ModelInputs;
import dev.finetune.trainers.train.TrainableModel;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * The model as the recipe's {@link AdapterSpec} builds it: every weight trainable, or frozen (NF4 for QLoRA) with
 * LoRA adapters on the matched layers. Knows what to print about it and what to save after training.
 */
final class BuiltModel {
    private final LlamaModel model;
    private final LoraFactory lora;
    private final AdapterSpec.Lora spec;
    private final TrainableModel<LlamaTrainable.Shared> trainable;

    private BuiltModel(LlamaModel model, LoraFactory lora, AdapterSpec.Lora spec) {
        this.model = model;
        this.lora = lora;
        this.spec = spec;
        this.trainable = new Switched(new LlamaTrainable(model), lora);
    }

    static BuiltModel forTraining(Recipe recipe, Path modelDir, NDManager manager) {
        if (recipe.adapter() instanceof AdapterSpec.Lora spec) {
            LoraFactory factory = new LoraFactory(spec, manager, recipe.training().seed());
            LlamaModel model = LlamaModel.load(modelDir, manager, LoadOptions.adapters(factory));
            factory.requireMatches();
            return new BuiltModel(model, factory, spec);
        }
        return new BuiltModel(LlamaModel.load(modelDir, manager, LoadOptions.fullFineTune()), null, null);
    }

    /** {@code lora_model_dir}: starts the adapters from a saved PEFT adapter instead of B = 0. */
    void loadAdapter(Path adapterDir, NDManager manager) {
        if (lora == null) {
            throw new UserError("lora_model_dir", "a saved adapter needs adapter: lora or qlora",
                    "set adapter: lora with the rank and targets the adapter was trained with, or remove lora_model_dir");
        }
        try (NDManager loading = manager.newSubManager()) {
            AdapterFiles.Saved saved = AdapterFiles.read(adapterDir, loading);
            AdapterWeights.load(model.trainable(), saved.tensors(), adapterDir.resolve(AdapterFiles.WEIGHTS_FILE).toString());
        }
    }

    /** From now on the reference model (DPO, GRPO) is the adapter as it is now, not the base. */
    void freezeReference() {
        lora.freezeReference();
    }

    LlamaModel model() {
        return model;
    }

    TrainableModel<LlamaTrainable.Shared> trainable() {
        return trainable;
    }

    /** The adapter on/off switch (the reference model of DPO and GRPO), or {@code null} for a full fine-tune. */
    AdapterSwitch adapters() {
        return lora == null ? null : lora.adapters();
    }

    /** Which layers train and how many parameters that is, e.g. for a LoRA recipe the matched modules. */
    String describe() {
        long trained = model.trainable().stream().mapToLong(p -> p.array().size()).sum();
        if (lora == null) {
            return String.format(Locale.ROOT, "model: full fine-tune, %,d trainable parameters%n", trained);
        }
        List<String> matched = lora.requireMatches();
        Map<String, Integer> byModule = new TreeMap<>();
        for (String layer : matched) {
            byModule.merge(layer.substring(layer.lastIndexOf('.') + 1), 1, Integer::sum);
        }
        List<String> parts = new ArrayList<>();
        byModule.forEach((module, count) -> parts.add(module + " x" + count));
        long base = LlamaModel.expectedShapes(model.config()).values().stream().mapToLong(s -> s.size()).sum();
        return String.format(Locale.ROOT, "model: %s r=%d alpha=%s on %d linear layers (%s); %,d trainable parameters, %.2f%% of %,d%n",
                spec.quantized() ? "QLoRA (NF4 base weights)" : "LoRA", spec.r(), number(spec.alpha()), matched.size(),
                String.join(", ", parts), trained, 100.0 * trained / base, base);
    }

    private static String number(double value) {
        return value == Math.rint(value) ? Long.toString((long) value) : Double.toString(value);
    }

    /** What {@link #save} writes, for the closing line. */
    String savedWhat() {
        return lora == null ? "model.safetensors" : AdapterFiles.WEIGHTS_FILE;
    }

    /**
     * The trained result in Hugging Face layout: PEFT adapter files, or for a full fine-tune {@code model.safetensors}
     * with the base model's {@code config.json}. Each file is written under a temporary name and renamed.
     */
    void save(Path outputDir, Recipe recipe) {
        try {
            Files.createDirectories(outputDir);
            if (lora != null) {
                Path staging = Files.createTempDirectory(outputDir, ".adapter-");
                AdapterFiles.write(staging, AdapterConfig.of(spec, lora.peftTargets(), recipe.model().baseModel()),
                        model.trainable());
                publish(staging, outputDir, List.of(AdapterFiles.WEIGHTS_FILE, AdapterConfig.FILE_NAME));
            } else {
                List<NamedArray> weights = new ArrayList<>();
                for (Map.Entry<String, NDArray> e : model.weights().entrySet()) {
                    weights.add(new NamedArray(e.getKey(), e.getValue()));
                }
                Path staging = Files.createTempDirectory(outputDir, ".model-");
                SafetensorsWriter.write(staging.resolve("model.safetensors"), weights, SafetensorsDtype.F32,
                        Map.of("format", "pt"));
                Files.copy(Path.of(recipe.model().baseModel()).resolve("config.json"), staging.resolve("config.json"));
                publish(staging, outputDir, List.of("model.safetensors", "config.json"));
            }
        } catch (IOException | java.io.UncheckedIOException e) {
            removeStaging(outputDir);
            throw new UserError(outputDir.toString(), "cannot write the trained weights (" + e.getMessage()
                    + "); the partial copy was removed, and the last checkpoint holds the trained state",
                    "free space on the disk of output_dir, then rerun with resume_from_checkpoint=true", e);
        }
    }

    /** Deletes half-written staging folders of {@link #save}; nothing in them was published. */
    private static void removeStaging(Path outputDir) {
        try (var children = Files.list(outputDir)) {
            for (Path child : children.toList()) {
                String name = child.getFileName().toString();
                if (Files.isDirectory(child) && (name.startsWith(".adapter-") || name.startsWith(".model-"))) {
                    try (var walk = Files.walk(child)) {
                        for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
                            Files.deleteIfExists(p);
                        }
                    }
                }
            }
        } catch (IOException e) {
            // best effort: a leftover hidden folder holds nothing anyone reads
        }
    }

    /**
     * What turns a checkpoint's weights into a folder the HF stack opens: {@code adapter_config.json} next to the
     * adapter (PeftModel.from_pretrained), or the base's {@code config.json} next to a full model's weights; and
     * the tokenizer, as the HF Trainer saves it with every checkpoint.
     */
    void writeCheckpointFiles(Path folder, Recipe recipe, Path tokenizerDir) throws IOException {
        if (lora != null) {
            AdapterConfig.of(spec, lora.peftTargets(), recipe.model().baseModel()).write(folder);
        } else {
            Files.copy(Path.of(recipe.model().baseModel()).resolve("config.json"), folder.resolve("config.json"));
        }
        RunFiles.copyTokenizer(tokenizerDir, folder);
    }

    private static void publish(Path staging, Path outputDir, List<String> files) throws IOException {
        for (String file : files) {
            Files.move(staging.resolve(file), outputDir.resolve(file), StandardCopyOption.REPLACE_EXISTING,
                    StandardCopyOption.ATOMIC_MOVE);
        }
        Files.delete(staging);
    }

    /**
     * The Llama model with LoRA dropout following the loop's train/eval switch: the loop calls
     * {@link #setTraining} around training steps and evaluations, and only the factory's switch reaches the adapters.
     */
    private record Switched(LlamaTrainable model, LoraFactory lora) implements TrainableModel<LlamaTrainable.Shared> {
        @Override
        public List<NamedArray> trainable() {
            return model.trainable();
        }

        @Override
        public long parameterCount() {
            return model.parameterCount();
        }

        @Override
        public void setTraining(boolean training) {
            model.setTraining(training);
            if (lora != null) {
                lora.adapters().setTraining(training);
            }
        }

        @Override
        public LlamaTrainable.Shared prepare(ModelInputs inputs) {
            return model.prepare(inputs);
        }

        @Override
        public NDArray embed(ModelInputs inputs) {
            return model.embed(inputs);
        }

        @Override
        public List<? extends Layer<LlamaTrainable.Shared>> layers() {
            return model.layers();
        }

        @Override
        public NDArray finalNormAndHead(NDArray hidden) {
            return model.finalNormAndHead(hidden);
        }
    }
}
