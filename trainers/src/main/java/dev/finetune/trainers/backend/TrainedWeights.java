package dev.finetune.trainers.backend;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.io.AtomicFiles;
import dev.finetune.adapters.io.SafetensorsDtype;
import dev.finetune.adapters.io.SafetensorsWriter;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.adapters.peft.AdapterWeights;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.trainers.model.LlamaModel;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

/**
 * What training changes: every weight of the model, or LoRA adapters over frozen (optionally NF4) weights. Each
 * kind answers for itself what it prints, what it saves and whether it has a switch that gives back the base model
 * (the reference of DPO and GRPO).
 */
sealed interface TrainedWeights {

    /** The adapter on/off switch, absent for a full fine-tune (which has no second copy of the weights). */
    Optional<AdapterSwitch> adapters();

    /** {@code lora_model_dir}: starts training from a saved PEFT adapter instead of B = 0. */
    void loadAdapter(LlamaModel model, Path adapterDir, NDManager manager);

    /** From now on the reference model (DPO, GRPO) is the adapter as it is now, not the base. */
    void freezeReference();

    void setTraining(boolean training);

    String describe(LlamaModel model);

    /** The file that holds the result, for the closing line. */
    String savedWhat();

    /** The file that makes {@code folder}'s weights loadable by the HF stack: the PEFT or the model config. */
    void writeConfig(Path folder, String baseModel) throws IOException;

    /** Writes the result into {@code outputDir} in Hugging Face layout; {@code baseModel} as the recipe names it. */
    void save(LlamaModel model, Path outputDir, String baseModel) throws IOException;

    /**
     * Every parameter trains; the result is {@code model.safetensors} with the {@code config.json} of the folder the
     * weights were loaded from (the recipe's {@code overrides_of_model_config} applied, as trained: HubModels.base).
     */
    record Full(Path modelDir) implements TrainedWeights {
        @Override
        public Optional<AdapterSwitch> adapters() {
            return Optional.empty();
        }

        @Override
        public void loadAdapter(LlamaModel model, Path adapterDir, NDManager manager) {
            // The recipe reader refuses lora_model_dir without an adapter, so a full fine-tune never gets here.
            throw new IllegalStateException("lora_model_dir needs adapter: lora or qlora");
        }

        @Override
        public void freezeReference() {
            // a full fine-tune takes its reference from the weights before the first step (ObjectiveSetup)
            throw new IllegalStateException("a full fine-tune has no adapter to freeze");
        }

        @Override
        public void setTraining(boolean training) {}

        @Override
        public String describe(LlamaModel model) {
            return String.format(Locale.ROOT, "model: full fine-tune, %,d trainable parameters%n", trained(model));
        }

        @Override
        public String savedWhat() {
            return "model.safetensors";
        }

        @Override
        public void writeConfig(Path folder, String baseModel) throws IOException {
            Files.copy(modelDir.resolve("config.json"), folder.resolve("config.json"));
        }

        @Override
        public void save(LlamaModel model, Path outputDir, String baseModel) throws IOException {
            List<NamedArray> weights = new ArrayList<>();
            for (Map.Entry<String, NDArray> e : model.weights().entrySet()) {
                weights.add(new NamedArray(e.getKey(), e.getValue()));
            }
            Path staging = Files.createTempDirectory(outputDir, ".model-");
            SafetensorsWriter.write(staging.resolve("model.safetensors"), weights, SafetensorsDtype.F32,
                    Map.of("format", "pt"));
            Files.copy(modelDir.resolve("config.json"), staging.resolve("config.json"));
            publish(staging, outputDir, List.of("model.safetensors", "config.json"));
        }
    }

    /** LoRA or QLoRA adapters on the layers {@code factory} matched; the result is a PEFT adapter folder. */
    record Adapter(AdapterSpec.Lora spec, LoraFactory factory) implements TrainedWeights {
        @Override
        public Optional<AdapterSwitch> adapters() {
            return Optional.of(factory.adapters());
        }

        @Override
        public void loadAdapter(LlamaModel model, Path adapterDir, NDManager manager) {
            try (NDManager loading = manager.newSubManager()) {
                AdapterFiles.Saved saved = AdapterFiles.read(adapterDir, loading);
                AdapterWeights.load(model.trainable(), saved.tensors(),
                        adapterDir.resolve(AdapterFiles.WEIGHTS_FILE).toString());
            }
        }

        @Override
        public void freezeReference() {
            factory.freezeReference();
        }

        @Override
        public void setTraining(boolean training) {
            factory.adapters().setTraining(training);
        }

        @Override
        public String describe(LlamaModel model) {
            List<String> matched = factory.requireMatches();
            Map<String, Integer> byModule = new TreeMap<>();
            for (String layer : matched) {
                byModule.merge(layer.substring(layer.lastIndexOf('.') + 1), 1, Integer::sum);
            }
            List<String> parts = new ArrayList<>();
            byModule.forEach((module, count) -> parts.add(module + " x" + count));
            long base = LlamaModel.expectedShapes(model.config()).values().stream().mapToLong(s -> s.size()).sum();
            long trained = trained(model);
            return String.format(Locale.ROOT, "model: %s r=%d alpha=%s on %d linear layers (%s); %,d trainable "
                    + "parameters, %.2f%% of %,d%n", spec.quantized() ? "QLoRA (NF4 base weights)" : "LoRA", spec.r(),
                    number(spec.alpha()), matched.size(), String.join(", ", parts), trained, 100.0 * trained / base,
                    base);
        }

        @Override
        public String savedWhat() {
            return AdapterFiles.WEIGHTS_FILE;
        }

        @Override
        public void writeConfig(Path folder, String baseModel) throws IOException {
            AdapterConfig.of(spec, factory.peftTargets(), baseModel).write(folder);
        }

        @Override
        public void save(LlamaModel model, Path outputDir, String baseModel) throws IOException {
            Path staging = Files.createTempDirectory(outputDir, ".adapter-");
            AdapterFiles.write(staging, AdapterConfig.of(spec, factory.peftTargets(), baseModel),
                    model.trainable());
            publish(staging, outputDir, List.of(AdapterFiles.WEIGHTS_FILE, AdapterConfig.FILE_NAME));
        }

        private static String number(double value) {
            return value == Math.rint(value) ? Long.toString((long) value) : Double.toString(value);
        }
    }

    private static long trained(LlamaModel model) {
        return model.trainable().stream().mapToLong(p -> p.array().size()).sum();
    }

    private static void publish(Path staging, Path outputDir, List<String> files) throws IOException {
        for (String file : files) {
            AtomicFiles.publish(staging.resolve(file), outputDir.resolve(file));
        }
        Files.delete(staging);
    }
}
