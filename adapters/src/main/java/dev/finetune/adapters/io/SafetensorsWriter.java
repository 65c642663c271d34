package dev.finetune.adapters.io;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import dev.finetune.adapters.NamedArray;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Writes float32 arrays as F32, F16 or BF16 safetensors, single-file or sharded with an HF index.
 *
 * <p>The header is padded with spaces to a multiple of 8 bytes like Hugging Face's writer, so every tensor starts
 * aligned and others can map the file. Narrowing to 16 bits happens in Java (round to nearest even): the engine
 * never sees a 16-bit array. Each file is written to a temporary name and renamed when complete, so a crash never
 * leaves a half-written checkpoint under the real name.
 */
public final class SafetensorsWriter {
    private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().create();
    /** Bytes written per block; also bounds the memory a save needs beyond the model. */
    static long blockBytes = 64L << 20;

    private SafetensorsWriter() {}

    /** Writes {@code tensors} in order to {@code file}; {@code metadata} becomes {@code __metadata__} (may be empty). */
    public static void write(Path file, List<NamedArray> tensors, SafetensorsDtype dtype, Map<String, String> metadata) {
        requireWritable(dtype);
        Set<String> seen = new HashSet<>();
        for (NamedArray t : tensors) {
            if (!seen.add(t.name())) {
                throw new IllegalArgumentException("tensor '" + t.name() + "' given twice");
            }
        }
        JsonObject header = new JsonObject();
        if (!metadata.isEmpty()) {
            JsonObject meta = new JsonObject();
            metadata.forEach(meta::addProperty);
            header.add("__metadata__", meta);
        }
        long offset = 0;
        for (NamedArray t : tensors) {
            SafetensorsDtype onDisk = diskType(t, dtype);
            long length = t.array().size() * onDisk.bytes();
            JsonObject info = new JsonObject();
            info.addProperty("dtype", onDisk.name());
            JsonArray shape = new JsonArray();
            for (long d : t.array().getShape().getShape()) {
                shape.add(d);
            }
            info.add("shape", shape);
            JsonArray offsets = new JsonArray();
            offsets.add(offset);
            offsets.add(offset + length);
            info.add("data_offsets", offsets);
            header.add(t.name(), info);
            offset += length;
        }
        byte[] json = GSON.toJson(header).getBytes(StandardCharsets.UTF_8);
        int padded = (json.length + 7) / 8 * 8;
        ByteBuffer prefix = ByteBuffer.allocate(8 + padded).order(ByteOrder.LITTLE_ENDIAN);
        prefix.putLong(padded).put(json);
        while (prefix.hasRemaining()) {
            prefix.put((byte) ' ');
        }
        prefix.flip();

        try {
            AtomicFiles.write(file, temporary -> {
                try (FileChannel out = FileChannel.open(temporary, StandardOpenOption.CREATE,
                        StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE)) {
                    writeFully(out, prefix);
                    for (NamedArray t : tensors) {
                        writeData(out, t, diskType(t, dtype));
                    }
                    out.force(false);
                }
            });
        } catch (IOException e) {
            throw new UncheckedIOException("writing " + file + ": " + e.getMessage(), e);
        }
    }

    /**
     * Writes {@code model-0000i-of-0000n.safetensors} files of at most {@code maxShardBytes} each (a single larger
     * tensor gets a shard of its own) plus {@value SafetensorsReader#INDEX_FILE}, as {@code save_pretrained} does.
     */
    public static void writeSharded(Path dir, List<NamedArray> tensors, SafetensorsDtype dtype, long maxShardBytes,
            Map<String, String> metadata) {
        requireWritable(dtype);
        List<List<NamedArray>> shards = new ArrayList<>();
        List<NamedArray> current = new ArrayList<>();
        long currentBytes = 0;
        long total = 0;
        for (NamedArray t : tensors) {
            long bytes = t.array().size() * diskType(t, dtype).bytes();
            if (!current.isEmpty() && currentBytes + bytes > maxShardBytes) {
                shards.add(current);
                current = new ArrayList<>();
                currentBytes = 0;
            }
            current.add(t);
            currentBytes += bytes;
            total += bytes;
        }
        if (!current.isEmpty()) {
            shards.add(current);
        }
        JsonObject weightMap = new JsonObject();
        for (int i = 0; i < shards.size(); i++) {
            String name = String.format("model-%05d-of-%05d.safetensors", i + 1, shards.size());
            write(dir.resolve(name), shards.get(i), dtype, metadata);
            for (NamedArray t : shards.get(i)) {
                weightMap.addProperty(t.name(), name);
            }
        }
        JsonObject index = new JsonObject();
        JsonObject indexMeta = new JsonObject();
        indexMeta.addProperty("total_size", total);
        index.add("metadata", indexMeta);
        index.add("weight_map", weightMap);
        try {
            Files.writeString(dir.resolve(SafetensorsReader.INDEX_FILE), new GsonBuilder().setPrettyPrinting().create().toJson(index));
        } catch (IOException e) {
            throw new UncheckedIOException("writing the index in " + dir + ": " + e.getMessage(), e);
        }
    }

    private static void requireWritable(SafetensorsDtype dtype) {
        if (dtype != SafetensorsDtype.F32 && dtype != SafetensorsDtype.F16 && dtype != SafetensorsDtype.BF16) {
            throw new IllegalArgumentException("float tensors are written as F32, F16 or BF16, not " + dtype);
        }
    }

    /** Integer arrays (token ids, step counters in checkpoints) keep their own type; floats take the requested one. */
    private static SafetensorsDtype diskType(NamedArray t, SafetensorsDtype floatType) {
        DataType type = t.array().getDataType();
        return switch (type) {
            case FLOAT32 -> floatType;
            case INT64 -> SafetensorsDtype.I64;
            case INT32 -> SafetensorsDtype.I32;
            default -> throw new IllegalArgumentException("tensor '" + t.name() + "' is " + type + "; we write float32, int64 and int32 arrays");
        };
    }

    /**
     * Streams the tensor out in row blocks read through direct views of the engine's memory, so saving needs no
     * heap copy of the tensor and works past the 2 GB a Java buffer can address.
     */
    private static void writeData(FileChannel out, NamedArray t, SafetensorsDtype onDisk) throws IOException {
        NDArray array = t.array();
        long rows = array.getShape().dimension() == 0 ? 1 : array.getShape().get(0);
        long rowBytes = rows == 0 ? 0 : array.size() * array.getDataType().getNumOfBytes() / rows;
        if (array.size() == 0) {
            return;
        }
        if (array.getShape().dimension() == 0 || rowBytes * rows <= blockBytes || rowBytes > blockBytes) {
            writeBlock(out, array, onDisk);
            return;
        }
        long rowsPerBlock = Math.max(1, blockBytes / rowBytes);
        for (long from = 0; from < rows; from += rowsPerBlock) {
            try (NDArray block = array.get(new NDIndex(from + ":" + Math.min(rows, from + rowsPerBlock)))) {
                writeBlock(out, block, onDisk);
            }
        }
    }

    private static void writeBlock(FileChannel out, NDArray block, SafetensorsDtype onDisk) throws IOException {
        ByteBuffer data = block.toByteBuffer(true).order(ByteOrder.LITTLE_ENDIAN);
        if (onDisk != SafetensorsDtype.F16 && onDisk != SafetensorsDtype.BF16) {
            writeFully(out, data);
            return;
        }
        FloatBuffer floats = data.asFloatBuffer();
        ByteBuffer chunk = ByteBuffer.allocate(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
        while (floats.hasRemaining()) {
            chunk.clear();
            while (chunk.hasRemaining() && floats.hasRemaining()) {
                float v = floats.get();
                chunk.putShort(onDisk == SafetensorsDtype.BF16 ? HalfFloats.floatToBf16(v) : HalfFloats.floatToF16(v));
            }
            chunk.flip();
            writeFully(out, chunk);
        }
    }

    private static void writeFully(FileChannel out, ByteBuffer data) throws IOException {
        while (data.hasRemaining()) {
            out.write(data);
        }
    }
}
