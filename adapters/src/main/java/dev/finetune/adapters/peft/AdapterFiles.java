package dev.finetune.adapters.peft;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.io.SafetensorsDtype;
import dev.finetune.adapters.io.SafetensorsReader;
import dev.finetune.adapters.io.SafetensorsWriter;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A LoRA adapter on disk as PEFT saves it: {@code adapter_config.json} next to {@code adapter_model.safetensors}
 * (float32 tensors named {@code base_model.model.<layer>.lora_A.weight} / {@code lora_B.weight}, and
 * {@code __metadata__ {"format": "pt"}} as safetensors' torch helper writes), so PEFT, vLLM and our merge load it.
 */
public final class AdapterFiles {
    public static final String WEIGHTS_FILE = "adapter_model.safetensors";

    private AdapterFiles() {}

    /** An adapter read back: its config and its tensors by PEFT name. */
    public record Saved(AdapterConfig config, Map<String, NDArray> tensors) {}

    /** Writes both files into {@code directory}, creating it if needed. */
    public static void write(Path directory, AdapterConfig config, List<NamedArray> tensors) {
        for (NamedArray tensor : tensors) {
            if (PeftNames.moduleOf(tensor.name()).isEmpty()) {
                throw new IllegalArgumentException(tensor.name() + " is not a PEFT LoRA tensor name");
            }
        }
        try {
            Files.createDirectories(directory);
            SafetensorsWriter.write(directory.resolve(WEIGHTS_FILE), tensors, SafetensorsDtype.F32,
                    Map.of("format", "pt"));
            config.write(directory);
        } catch (IOException e) {
            throw new UserError(directory.toString(), "cannot write the adapter: " + e.getMessage(),
                    "check that output_dir is writable and the disk has space", e);
        }
    }

    /** Reads both files; tensors come back as float32 copies owned by {@code manager}. */
    public static Saved read(Path directory, NDManager manager) {
        AdapterConfig config = AdapterConfig.read(directory);
        Map<String, NDArray> tensors = new LinkedHashMap<>();
        try (SafetensorsReader reader = SafetensorsReader.open(directory.resolve(WEIGHTS_FILE))) {
            for (String name : reader.names()) {
                tensors.put(name, reader.load(name, manager));
            }
        }
        return new Saved(config, tensors);
    }
}
