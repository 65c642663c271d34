package dev.finetune.trainers.backend.fsdp;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.adapters.io.AtomicFiles;
import dev.finetune.recipes.UserError;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Host arrays (ints, longs, bytes, doubles) as one safetensors file, streamed, written under a temporary name and
 * renamed when complete. The worker reads it with {@code safetensors.torch.load_file}; no engine is needed here.
 */
final class TensorsFile {
    private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().create();

    /** Streams a tensor's values, little-endian, in row-major order. */
    interface Values {
        void writeTo(ByteSink sink) throws IOException;
    }

    /** @param dtype safetensors dtype name: I32, I64, U8 or F64 */
    record Tensor(String name, String dtype, long[] shape, Values values) {
        long bytes() {
            long count = 1;
            for (long d : shape) {
                count = Math.multiplyExact(count, d);
            }
            return count * switch (dtype) {
                case "U8" -> 1;
                case "I32" -> 4;
                case "I64", "F64" -> 8;
                default -> throw new IllegalArgumentException("dtype " + dtype);
            };
        }
    }

    /** A little-endian writer over a buffered stream. */
    static final class ByteSink {
        private final OutputStream out;
        private final ByteBuffer buffer = ByteBuffer.allocate(1 << 16).order(ByteOrder.LITTLE_ENDIAN);
        private long written;

        ByteSink(OutputStream out) {
            this.out = out;
        }

        void int32(long value) throws IOException {
            room(4);
            buffer.putInt(Math.toIntExact(value));
        }

        void int64(long value) throws IOException {
            room(8);
            buffer.putLong(value);
        }

        void float64(double value) throws IOException {
            room(8);
            buffer.putDouble(value);
        }

        void uint8(byte value) throws IOException {
            room(1);
            buffer.put(value);
        }

        private void room(int bytes) throws IOException {
            if (buffer.remaining() < bytes) {
                flush();
            }
            written += bytes;
        }

        void flush() throws IOException {
            out.write(buffer.array(), 0, buffer.position());
            buffer.clear();
        }
    }

    private TensorsFile() {}

    static void write(Path file, List<Tensor> tensors, Map<String, String> metadata) {
        JsonObject header = new JsonObject();
        JsonObject meta = new JsonObject();
        metadata.forEach(meta::addProperty);
        header.add("__metadata__", meta);
        long offset = 0;
        for (Tensor t : tensors) {
            JsonObject info = new JsonObject();
            info.addProperty("dtype", t.dtype());
            JsonArray shape = new JsonArray();
            for (long d : t.shape()) {
                shape.add(d);
            }
            info.add("shape", shape);
            JsonArray offsets = new JsonArray();
            offsets.add(offset);
            offsets.add(offset + t.bytes());
            info.add("data_offsets", offsets);
            header.add(t.name(), info);
            offset += t.bytes();
        }
        byte[] json = GSON.toJson(header).getBytes(StandardCharsets.UTF_8);
        int padded = (json.length + 7) / 8 * 8;
        try {
            AtomicFiles.write(file, temporary -> {
                try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(temporary), 1 << 16)) {
                    ByteSink sink = new ByteSink(out);
                    sink.int64(padded);
                    for (byte b : json) {
                        sink.uint8(b);
                    }
                    for (int i = json.length; i < padded; i++) {
                        sink.uint8((byte) ' ');
                    }
                    for (Tensor t : tensors) {
                        long before = sink.written;
                        t.values().writeTo(sink);
                        if (sink.written - before != t.bytes()) {
                            throw new IllegalStateException(t.name() + " wrote " + (sink.written - before)
                                    + " bytes, not " + t.bytes());
                        }
                    }
                    sink.flush();
                }
            });
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot write: " + e.getMessage(),
                    "check that the folder is writable and the disk has space", e);
        }
    }

    /** The {@code __metadata__} of a safetensors file, reading only its header. */
    static Map<String, String> metadata(Path file) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            byte[] size = in.readNBytes(8);
            long length = ByteBuffer.wrap(size).order(ByteOrder.LITTLE_ENDIAN).getLong();
            if (size.length != 8 || length < 2 || length > (64 << 20)) {
                throw new IOException("not a safetensors file");
            }
            byte[] json = new byte[(int) length];
            new DataInputStream(in).readFully(json);
            JsonObject header = JsonParser.parseString(new String(json, StandardCharsets.UTF_8)).getAsJsonObject();
            Map<String, String> out = new LinkedHashMap<>();
            if (header.has("__metadata__")) {
                header.getAsJsonObject("__metadata__").entrySet()
                        .forEach(e -> out.put(e.getKey(), e.getValue().getAsString()));
            }
            return out;
        }
    }
}
