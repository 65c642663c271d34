package dev.finetune.adapters.io;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.MappedByteBuffer;
import java.nio.ShortBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * Reads tensors from one safetensors file or a sharded checkpoint ({@code model.safetensors.index.json}).
 *
 * <p>Only the headers are parsed up front; each tensor is read on request, straight from the file into memory
 * that libtorch owns, so loading a model costs its float32 size and nothing more (no whole-file heap copy as in
 * DJL's own decoder, no 2 GB limit). BF16 and F16 are widened to float32 here, in Java. Not thread-safe.
 */
public final class SafetensorsReader implements AutoCloseable {
    public static final String SINGLE_FILE = "model.safetensors";
    public static final String INDEX_FILE = "model.safetensors.index.json";

    /** Largest header we accept; real headers are kilobytes, a corrupt length field is not. */
    private static final long MAX_HEADER_BYTES = 100L << 20;
    /** Fill big tensors row block by row block: one Java buffer cannot address more than 2 GB. */
    static long maxChunkBytes = 1L << 30;

    /** Where one tensor's bytes lie. {@code offset} is absolute in {@code file}. */
    public record Entry(String name, SafetensorsDtype dtype, Shape shape, Path file, long offset, long length) {}

    private final Map<String, Entry> entries;
    private final Map<String, String> metadata;
    private final Map<Path, FileChannel> channels;
    private ByteBuffer staging;

    private SafetensorsReader(Map<String, Entry> entries, Map<String, String> metadata, Map<Path, FileChannel> channels) {
        this.entries = entries;
        this.metadata = metadata;
        this.channels = channels;
    }

    /** Opens a {@code .safetensors} file, or a directory holding a sharded index or {@code model.safetensors}. */
    public static SafetensorsReader open(Path path) {
        if (Files.isDirectory(path)) {
            Path index = path.resolve(INDEX_FILE);
            if (Files.isRegularFile(index)) {
                return openSharded(index);
            }
            Path single = path.resolve(SINGLE_FILE);
            if (Files.isRegularFile(single)) {
                return openFiles(List.of(single));
            }
            throw new UserError(path.toString(), "no " + SINGLE_FILE + " or " + INDEX_FILE + " in this directory",
                    "point at a Hugging Face model directory with safetensors weights (.bin checkpoints are not read)");
        }
        if (!Files.isRegularFile(path)) {
            throw new UserError(path.toString(), "no such file or directory", "check the path");
        }
        return openFiles(List.of(path));
    }

    private static SafetensorsReader openSharded(Path index) {
        JsonObject weightMap;
        try {
            JsonObject root = JsonParser.parseString(dev.finetune.recipes.BoundedFiles.readText(index,
                    dev.finetune.recipes.BoundedFiles.CONFIG_BYTES, "the checkpoint index")).getAsJsonObject();
            JsonElement map = root.get("weight_map");
            if (map == null || !map.isJsonObject()) {
                throw new UserError(index.toString(), "missing the 'weight_map' object", "a sharded checkpoint index maps each tensor to its file");
            }
            weightMap = map.getAsJsonObject();
        } catch (JsonParseException | IllegalStateException e) {
            throw new UserError(index.toString(), "cannot read the checkpoint index: "
                    + dev.finetune.recipes.model.ModelConfig.jsonProblem(e), "restore the file from the model's source");
        }
        List<Path> shards = new ArrayList<>();
        for (String file : new TreeSet<>(weightMap.entrySet().stream().map(e -> e.getValue().getAsString()).toList())) {
            shards.add(index.resolveSibling(file));
        }
        SafetensorsReader reader = openFiles(shards);
        for (Map.Entry<String, JsonElement> e : weightMap.entrySet()) {
            Entry entry = reader.entries.get(e.getKey());
            Path expected = index.resolveSibling(e.getValue().getAsString());
            if (entry == null || !entry.file().equals(expected)) {
                reader.close();
                throw new UserError(index.toString(), "tensor '" + e.getKey() + "' is not in " + expected.getFileName() + " as the index says",
                        "the shards and the index come from different saves; download or save the checkpoint again");
            }
        }
        return reader;
    }

    private static SafetensorsReader openFiles(List<Path> files) {
        Map<String, Entry> entries = new LinkedHashMap<>();
        Map<String, String> metadata = new LinkedHashMap<>();
        Map<Path, FileChannel> channels = new LinkedHashMap<>();
        try {
            for (Path file : files) {
                FileChannel channel;
                try {
                    channel = FileChannel.open(file, StandardOpenOption.READ);
                } catch (IOException e) {
                    throw new UserError(file.toString(), "cannot open: " + e.getMessage(), "check the file exists and is readable");
                }
                channels.put(file, channel);
                readHeader(file, channel, entries, metadata);
            }
        } catch (RuntimeException e) {
            channels.values().forEach(SafetensorsReader::closeQuietly);
            throw e;
        }
        return new SafetensorsReader(entries, Collections.unmodifiableMap(metadata), channels);
    }

    private static void readHeader(Path file, FileChannel channel, Map<String, Entry> entries, Map<String, String> metadata) {
        String where = file.toString();
        try {
            long size = channel.size();
            ByteBuffer lengthBytes = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            readFully(channel, lengthBytes, 0, where);
            long headerLength = lengthBytes.getLong(0);
            if (headerLength <= 0 || headerLength > MAX_HEADER_BYTES || 8 + headerLength > size) {
                throw new UserError(where, "not a safetensors file (header length " + headerLength + ", file size " + size + ")",
                        "the file is truncated or in another format");
            }
            ByteBuffer header = ByteBuffer.allocate((int) headerLength);
            readFully(channel, header, 8, where);
            JsonObject json = JsonParser.parseString(new String(header.array(), StandardCharsets.UTF_8)).getAsJsonObject();
            long dataStart = 8 + headerLength;
            long dataSize = size - dataStart;
            List<Entry> own = new ArrayList<>();
            for (Map.Entry<String, JsonElement> e : json.entrySet()) {
                if (e.getKey().equals("__metadata__")) {
                    for (Map.Entry<String, JsonElement> m : e.getValue().getAsJsonObject().entrySet()) {
                        // The format says string to string; some writers put other JSON there, which must not make the weights unreadable.
                        JsonElement v = m.getValue();
                        metadata.put(m.getKey(), v.isJsonPrimitive() ? v.getAsString() : v.toString());
                    }
                    continue;
                }
                Entry entry = parseEntry(file, e.getKey(), e.getValue().getAsJsonObject(), dataStart, dataSize);
                if (entries.put(entry.name(), entry) != null) {
                    throw new UserError(where, "tensor '" + entry.name() + "' appears in more than one shard", "save the checkpoint again");
                }
                own.add(entry);
            }
            requireDisjoint(where, own);
        } catch (IOException | JsonParseException | IllegalStateException | UnsupportedOperationException
                | ClassCastException | NullPointerException | NumberFormatException | ArithmeticException e) {
            throw new UserError(where, "unreadable safetensors header: " + e.getMessage(), "the file is truncated or in another format");
        }
    }

    /** Two tensors whose byte ranges overlap would read each other's bytes: refuse the file rather than guess. */
    private static void requireDisjoint(String where, List<Entry> entries) {
        List<Entry> byOffset = new ArrayList<>(entries);
        byOffset.sort(java.util.Comparator.comparingLong(Entry::offset).thenComparingLong(Entry::length));
        for (int i = 1; i < byOffset.size(); i++) {
            Entry previous = byOffset.get(i - 1);
            Entry next = byOffset.get(i);
            if (next.offset() < previous.offset() + previous.length()) {
                throw new UserError(where, "tensors '" + previous.name() + "' and '" + next.name()
                        + "' share bytes (their data_offsets overlap)", "the file is corrupt or crafted; download or "
                        + "save it again");
            }
        }
    }

    private static Entry parseEntry(Path file, String name, JsonObject info, long dataStart, long dataSize) {
        String where = file + ": " + name;
        String dtypeName = info.get("dtype").getAsString();
        SafetensorsDtype dtype = SafetensorsDtype.parse(dtypeName);
        if (dtype == null) {
            throw new UserError(where, "tensor '" + name + "' has dtype " + dtypeName + ", which we cannot read",
                    "supported: F32, F16, BF16, I64, I32; convert the checkpoint with safetensors in Python");
        }
        var shapeJson = info.get("shape").getAsJsonArray();
        long[] dims = new long[shapeJson.size()];
        long elements = 1;
        for (int i = 0; i < dims.length; i++) {
            dims[i] = shapeJson.get(i).getAsLong();
            if (dims[i] < 0) {
                throw new UserError(where, "tensor '" + name + "' has a negative dimension in its shape " + shapeJson,
                        "the file is corrupt; download or save it again");
            }
            elements = Math.multiplyExact(elements, dims[i]);
        }
        var offsets = info.get("data_offsets").getAsJsonArray();
        long begin = offsets.get(0).getAsLong();
        long end = offsets.get(1).getAsLong();
        if (begin < 0 || end < begin || end > dataSize || end - begin != Math.multiplyExact(elements, dtype.bytes())) {
            throw new UserError(where, "tensor '" + name + "' has data_offsets [" + begin + ", " + end + "] that do not fit its shape "
                    + new Shape(dims) + " and dtype " + dtype + " inside " + dataSize + " data bytes",
                    "the file is truncated or corrupt; download or save it again");
        }
        return new Entry(name, dtype, new Shape(dims), file, dataStart + begin, end - begin);
    }

    /** Tensor names in file order (shard by shard). */
    public List<String> names() {
        return List.copyOf(entries.keySet());
    }

    public boolean contains(String name) {
        return entries.containsKey(name);
    }

    /** The {@code __metadata__} of all files together. */
    public Map<String, String> metadata() {
        return metadata;
    }

    public Entry entry(String name) {
        Entry entry = entries.get(name);
        if (entry == null) {
            throw new UserError(where(), "missing tensor '" + name + "'", "the checkpoint does not match the model's config.json");
        }
        return entry;
    }

    /**
     * Fails with a {@link UserError} naming every missing, unexpected and wrongly shaped tensor; {@code expected}
     * maps each name the model needs to its shape.
     */
    public void requireExactly(Map<String, Shape> expected) {
        List<String> problems = new ArrayList<>();
        for (Map.Entry<String, Shape> e : expected.entrySet()) {
            Entry entry = entries.get(e.getKey());
            if (entry == null) {
                problems.add("missing '" + e.getKey() + "'");
            } else if (!entry.shape().equals(e.getValue())) {
                problems.add("'" + e.getKey() + "' has shape " + entry.shape() + " but the config needs " + e.getValue());
            }
        }
        for (String name : entries.keySet()) {
            if (!expected.containsKey(name)) {
                problems.add("unexpected '" + name + "'");
            }
        }
        if (!problems.isEmpty()) {
            int shown = Math.min(problems.size(), 8);
            String more = problems.size() > shown ? " and " + (problems.size() - shown) + " more" : "";
            throw new UserError(where(), "checkpoint does not match the model: " + String.join("; ", problems.subList(0, shown)) + more,
                    "check that config.json belongs to these weights");
        }
    }

    /**
     * A copy of the tensor in memory that libtorch owns: safe to train and to write into. Floats come back as
     * float32 whatever their width on disk.
     */
    public NDArray load(String name, NDManager manager) {
        Entry entry = entry(name);
        NDArray out = EngineTypes.allocate(manager, entry.shape(), entry.dtype().inMemory());
        try {
            long rowBytes = entry.shape().dimension() == 0 ? entry.length() : entry.length() / Math.max(1, entry.shape().get(0));
            long rows = entry.shape().dimension() == 0 ? 1 : entry.shape().get(0);
            if (entry.length() <= maxChunkBytes || rowBytes == 0 || rowBytes > maxChunkBytes) {
                fill(entry, entry.offset(), entry.length(), out);
            } else {
                long rowsPerChunk = Math.max(1, maxChunkBytes / rowBytes);
                for (long from = 0; from < rows; from += rowsPerChunk) {
                    long to = Math.min(rows, from + rowsPerChunk);
                    try (NDArray block = out.get(new NDIndex(from + ":" + to))) {
                        fill(entry, entry.offset() + from * rowBytes, (to - from) * rowBytes, block);
                    }
                }
            }
        } catch (RuntimeException e) {
            out.close();
            throw e;
        }
        return out;
    }

    /**
     * The tensor without a copy when its bytes can be used as they are (F32, I64, I32 under 2 GB): the array reads
     * the file's pages directly, so loading is instant and the weights share the page cache.
     *
     * <p><b>Never write into the result</b> (no in-place op, no optimizer step, no in-place merge): the mapping is
     * read-only and the engine answers a write with a segmentation fault of the whole JVM. Anything that may be
     * trained or modified must come from {@link #load}. Other dtypes fall back to {@link #load}.
     */
    public NDArray mapReadOnly(String name, NDManager manager) {
        Entry entry = entry(name);
        if (entry.dtype().widened() || entry.length() > Integer.MAX_VALUE || entry.offset() % entry.dtype().bytes() != 0
                || entry.length() == 0) {
            return load(name, manager);
        }
        MappedByteBuffer mapped;
        try {
            mapped = channels.get(entry.file()).map(FileChannel.MapMode.READ_ONLY, entry.offset(), entry.length());
        } catch (IOException e) {
            throw new UserError(entry.file().toString(), "cannot map tensor '" + name + "': " + e.getMessage(), "check the file is readable");
        }
        mapped.order(ByteOrder.LITTLE_ENDIAN);
        // The array keeps a reference to the buffer, so the mapping lives exactly as long as the array.
        return manager.create(mapped, entry.shape(), EngineTypes.checked(entry.dtype().inMemory()));
    }

    private void fill(Entry entry, long position, long length, NDArray target) {
        ByteBuffer destination = target.toByteBuffer(true).order(ByteOrder.LITTLE_ENDIAN);
        String where = entry.file() + ": " + entry.name();
        if (!entry.dtype().widened()) {
            readFully(channels.get(entry.file()), destination, position, where);
            return;
        }
        if (staging == null) {
            staging = ByteBuffer.allocateDirect(1 << 22).order(ByteOrder.LITTLE_ENDIAN);
        }
        FloatBuffer floats = destination.asFloatBuffer();
        IntBuffer bits = destination.asIntBuffer();
        long done = 0;
        while (done < length) {
            staging.clear();
            staging.limit((int) Math.min(staging.capacity(), length - done));
            readFully(channels.get(entry.file()), staging, position + done, where);
            staging.flip();
            ShortBuffer halves = staging.asShortBuffer();
            int count = halves.remaining();
            if (entry.dtype() == SafetensorsDtype.BF16) {
                for (int i = 0; i < count; i++) {
                    bits.put((halves.get(i) & 0xFFFF) << 16);
                }
            } else {
                for (int i = 0; i < count; i++) {
                    floats.put(HalfFloats.f16ToFloat(halves.get(i)));
                }
            }
            done += (long) count * 2;
        }
    }

    private static void readFully(FileChannel channel, ByteBuffer into, long position, String where) {
        try {
            long at = position;
            while (into.hasRemaining()) {
                int n = channel.read(into, at);
                if (n < 0) {
                    throw new UserError(where, "file ends before the tensor data does", "the file is truncated; download or save it again");
                }
                at += n;
            }
        } catch (IOException e) {
            throw new UserError(where, "read failed: " + e.getMessage(), "check the disk and the file");
        }
    }

    private String where() {
        return channels.size() == 1 ? channels.keySet().iterator().next().toString()
                : channels.keySet().iterator().next().getParent() + "/" + INDEX_FILE;
    }

    private static void closeQuietly(FileChannel channel) {
        try {
            channel.close();
        } catch (IOException ignored) {
            // Closing a read-only channel cannot lose data.
        }
    }

    /** Closes the files; arrays already loaded or mapped stay valid. */
    @Override
    public void close() {
        channels.values().forEach(SafetensorsReader::closeQuietly);
    }
}
