package dev.finetune.trainers.train.checkpoint;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Checkpoint tensors as safetensors files, bit-exact.
 *
 * <p>Uses DJL's own safetensors codec for now: checkpoints of trainable weights and moments stay far below its
 * 2 GB limit. The project's memory-mapped {@code dev.finetune.adapters.io} reader/writer replaces it here, in this
 * one class, once it is on main.
 */
final class TensorFile {
    private TensorFile() {}

    static void write(Path file, List<NamedArray> tensors) throws IOException {
        // The codec takes each tensor's name from the array itself; lend it the checkpoint name, then give it back.
        NDList list = new NDList();
        List<String> ownNames = new ArrayList<>();
        for (NamedArray tensor : tensors) {
            ownNames.add(tensor.array().getName());
            tensor.array().setName(tensor.name());
            list.add(tensor.array());
        }
        try (OutputStream out = Files.newOutputStream(file)) {
            list.encode(out, NDList.Encoding.SAFETENSORS);
        } finally {
            for (int i = 0; i < tensors.size(); i++) {
                tensors.get(i).array().setName(ownNames.get(i));
            }
        }
    }

    static Map<String, NDArray> read(Path file, NDManager manager) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            NDList list = NDList.decode(manager, in);
            Map<String, NDArray> byName = new LinkedHashMap<>();
            for (NDArray array : list) {
                byName.put(array.getName(), array);
            }
            return byName;
        }
    }
}
