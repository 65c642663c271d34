package dev.finetune.trainers.train.checkpoint;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.io.SafetensorsDtype;
import dev.finetune.adapters.io.SafetensorsReader;
import dev.finetune.adapters.io.SafetensorsWriter;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Checkpoint tensors as float32 safetensors files: bit-exact, and readable by any safetensors tool. */
final class TensorFile {
    private TensorFile() {}

    static void write(Path file, List<NamedArray> tensors) {
        // transformers refuses a safetensors file without format "pt" in its metadata
        SafetensorsWriter.write(file, tensors, SafetensorsDtype.F32, Map.of("format", "pt"));
    }

    /** Every tensor of {@code file}, copied into memory {@code manager} owns (safe to copy into trained arrays). */
    static Map<String, NDArray> read(Path file, NDManager manager) {
        Map<String, NDArray> byName = new LinkedHashMap<>();
        try (SafetensorsReader reader = SafetensorsReader.open(file)) {
            for (String name : reader.names()) {
                byName.put(name, reader.load(name, manager));
            }
        }
        return byName;
    }
}
