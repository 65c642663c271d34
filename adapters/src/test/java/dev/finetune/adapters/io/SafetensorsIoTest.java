package dev.finetune.adapters.io;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SafetensorsIoTest {
    @TempDir
    Path dir;
    NDManager manager;

    @BeforeEach
    void open() {
        manager = NDManager.newBaseManager();
    }

    @AfterEach
    void close() {
        manager.close();
    }

    @Test
    void float32RoundTripKeepsValuesOrderMetadataAndAlignment() throws IOException {
        NDArray a = manager.randomNormal(new Shape(3, 5));
        NDArray b = manager.randomNormal(new Shape(7));
        NDArray ids = manager.create(new long[] {4, -1, 1L << 40});
        Path file = dir.resolve("x.safetensors");
        SafetensorsWriter.write(file, List.of(new NamedArray("w.a", a), new NamedArray("w.b", b), new NamedArray("ids", ids)),
                SafetensorsDtype.F32, Map.of("format", "pt"));

        ByteBuffer head = ByteBuffer.wrap(Files.readAllBytes(file)).order(ByteOrder.LITTLE_ENDIAN);
        assertEquals(0, head.getLong(0) % 8, "header length must keep tensor data 8-byte aligned");
        try (SafetensorsReader reader = SafetensorsReader.open(file)) {
            assertEquals(List.of("w.a", "w.b", "ids"), reader.names());
            assertEquals(Map.of("format", "pt"), reader.metadata());
            assertArrayEquals(a.toFloatArray(), reader.load("w.a", manager).toFloatArray());
            assertArrayEquals(b.toFloatArray(), reader.mapReadOnly("w.b", manager).toFloatArray());
            NDArray readIds = reader.load("ids", manager);
            assertEquals(DataType.INT64, readIds.getDataType());
            assertArrayEquals(ids.toLongArray(), readIds.toLongArray());
            assertEquals(new Shape(3, 5), reader.load("w.a", manager).getShape());
        }
    }

    /** The bytes are written by hand here, so this checks the reader against the format, not against our writer. */
    @Test
    void halfPrecisionOnDiskIsWidenedExactlyToFloat32() throws IOException {
        short[] bf16 = {(short) 0x3F80, (short) 0xC040, (short) 0x3F81, (short) 0x0001, (short) 0xFF80};
        float[] bf16Expected = {1f, -3f, 1.0078125f, Float.intBitsToFloat(0x00010000), Float.NEGATIVE_INFINITY};
        short[] f16 = {(short) 0x3C00, (short) 0xC000, (short) 0x0001, (short) 0x7C00, (short) 0x3555, (short) 0x8400};
        float[] f16Expected = {1f, -2f, 0x1p-24f, Float.POSITIVE_INFINITY, 0.333251953125f, -0x1p-14f};
        Path file = dir.resolve("half.safetensors");
        writeRaw(file, Map.of("b", "BF16", "h", "F16"), Map.of("b", bf16, "h", f16));

        try (SafetensorsReader reader = SafetensorsReader.open(file)) {
            NDArray b = reader.load("b", manager);
            assertEquals(DataType.FLOAT32, b.getDataType());
            assertArrayEquals(bf16Expected, b.toFloatArray());
            NDArray mapped = reader.mapReadOnly("h", manager);
            assertEquals(DataType.FLOAT32, mapped.getDataType());
            assertArrayEquals(f16Expected, mapped.toFloatArray());
        }
    }

    @Test
    void bf16AndF16WritingRoundsToNearestEven() {
        float[] values = {1.00390625f, 1.01171875f, -2.5f, 3.4e38f, 1e-9f, 0.1f};
        NDArray x = manager.create(values);
        for (SafetensorsDtype dtype : List.of(SafetensorsDtype.BF16, SafetensorsDtype.F16)) {
            Path file = dir.resolve(dtype + ".safetensors");
            SafetensorsWriter.write(file, List.of(new NamedArray("x", x)), dtype, Map.of());
            try (SafetensorsReader reader = SafetensorsReader.open(file)) {
                assertEquals(dtype, reader.entry("x").dtype());
                float[] back = reader.load("x", manager).toFloatArray();
                if (dtype == SafetensorsDtype.BF16) {
                    // Halfway cases go to the even mantissa (1+2^-8 -> 1, 1+3·2^-8 -> 1+2^-6); past the largest finite value -> inf, as torch does.
                    assertArrayEquals(new float[] {1f, 1.015625f, -2.5f, Float.POSITIVE_INFINITY, 9.968061931431293e-10f, 0.10009765625f}, back);
                } else {
                    assertArrayEquals(new float[] {1.00390625f, 1.01171875f, -2.5f, Float.POSITIVE_INFINITY, 0f, 0.0999755859375f}, back);
                }
            }
        }
    }

    @Test
    void guardRefusesBfloat16InsteadOfAbortingTheJvm() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> EngineTypes.allocate(manager, new Shape(2), DataType.BFLOAT16));
        assertTrue(e.getMessage().contains("BFLOAT16"));
        NDArray x = manager.create(new float[] {1f});
        assertThrows(IllegalArgumentException.class, () -> EngineTypes.convert(x, DataType.BFLOAT16));
        assertEquals(DataType.FLOAT16, EngineTypes.convert(x, DataType.FLOAT16).getDataType());
        for (SafetensorsDtype d : SafetensorsDtype.values()) {
            assertTrue(d.inMemory() != DataType.BFLOAT16, d + " must not be held as BFLOAT16");
        }
    }

    @Test
    void shardedCheckpointReadsLikeOneFile() throws IOException {
        List<NamedArray> tensors = List.of(
                new NamedArray("a", manager.randomNormal(new Shape(4, 4))),
                new NamedArray("b", manager.randomNormal(new Shape(4, 4))),
                new NamedArray("c", manager.randomNormal(new Shape(2))));
        SafetensorsWriter.writeSharded(dir, tensors, SafetensorsDtype.F32, 70, Map.of("format", "pt"));
        assertTrue(Files.exists(dir.resolve("model-00003-of-00003.safetensors")));
        try (SafetensorsReader reader = SafetensorsReader.open(dir)) {
            assertEquals(List.of("a", "b", "c"), reader.names());
            for (NamedArray t : tensors) {
                assertArrayEquals(t.array().toFloatArray(), reader.load(t.name(), manager).toFloatArray());
            }
        }
        String index = Files.readString(dir.resolve(SafetensorsReader.INDEX_FILE));
        Files.writeString(dir.resolve(SafetensorsReader.INDEX_FILE), index.replace("\"c\": \"model-00003", "\"c\": \"model-00001"));
        UserError e = assertThrows(UserError.class, () -> SafetensorsReader.open(dir));
        assertTrue(e.getMessage().contains("'c'"), e.getMessage());
    }

    @Test
    void bigTensorsAreFilledBlockByBlock() {
        NDArray x = manager.randomNormal(new Shape(10, 3));
        Path file = dir.resolve("rows.safetensors");
        long saved = SafetensorsReader.maxChunkBytes;
        SafetensorsReader.maxChunkBytes = 25;
        try {
            for (SafetensorsDtype dtype : List.of(SafetensorsDtype.F32, SafetensorsDtype.BF16)) {
                SafetensorsWriter.write(file, List.of(new NamedArray("x", x)), dtype, Map.of());
                try (SafetensorsReader reader = SafetensorsReader.open(file)) {
                    float[] whole = reader.load("x", manager).toFloatArray();
                    SafetensorsReader.maxChunkBytes = saved;
                    assertArrayEquals(reader.load("x", manager).toFloatArray(), whole);
                    SafetensorsReader.maxChunkBytes = 25;
                }
            }
        } finally {
            SafetensorsReader.maxChunkBytes = saved;
        }
    }

    @Test
    void writingInRowBlocksAndFromViewsKeepsLogicalValues() throws IOException {
        NDArray x = manager.randomNormal(new Shape(9, 4));
        NDArray transposed = x.transpose();
        Path whole = dir.resolve("whole.safetensors");
        Path blocks = dir.resolve("blocks.safetensors");
        List<NamedArray> tensors = List.of(new NamedArray("x", x), new NamedArray("t", transposed));
        SafetensorsWriter.write(whole, tensors, SafetensorsDtype.BF16, Map.of());
        long saved = SafetensorsWriter.blockBytes;
        SafetensorsWriter.blockBytes = 20;
        try {
            SafetensorsWriter.write(blocks, tensors, SafetensorsDtype.BF16, Map.of());
        } finally {
            SafetensorsWriter.blockBytes = saved;
        }
        assertArrayEquals(Files.readAllBytes(whole), Files.readAllBytes(blocks));
        try (SafetensorsReader reader = SafetensorsReader.open(blocks)) {
            assertArrayEquals(transposed.toFloatArray(), reader.load("t", manager).toFloatArray(), 0.01f);
            assertEquals(new Shape(4, 9), reader.entry("t").shape());
        }
    }

    @Test
    void mismatchedCheckpointNamesEveryOffendingTensor() {
        Path file = dir.resolve("m.safetensors");
        SafetensorsWriter.write(file, List.of(
                new NamedArray("model.norm.weight", manager.ones(new Shape(4))),
                new NamedArray("lm_head.weight", manager.ones(new Shape(3, 4))),
                new NamedArray("stray", manager.ones(new Shape(1)))), SafetensorsDtype.F32, Map.of());
        Map<String, Shape> expected = new LinkedHashMap<>();
        expected.put("model.norm.weight", new Shape(4));
        expected.put("lm_head.weight", new Shape(5, 4));
        expected.put("model.embed_tokens.weight", new Shape(5, 4));
        try (SafetensorsReader reader = SafetensorsReader.open(file)) {
            UserError e = assertThrows(UserError.class, () -> reader.requireExactly(expected));
            assertTrue(e.getMessage().contains("missing 'model.embed_tokens.weight'"), e.getMessage());
            assertTrue(e.getMessage().contains("'lm_head.weight' has shape (3, 4)"), e.getMessage());
            assertTrue(e.getMessage().contains("unexpected 'stray'"), e.getMessage());
            assertThrows(UserError.class, () -> reader.load("nope", manager));
        }
    }

    @Test
    void truncatedOrForeignFilesAreUserErrors() throws IOException {
        Path file = dir.resolve("t.safetensors");
        SafetensorsWriter.write(file, List.of(new NamedArray("x", manager.ones(new Shape(64)))), SafetensorsDtype.F32, Map.of());
        byte[] bytes = Files.readAllBytes(file);
        Files.write(file, java.util.Arrays.copyOf(bytes, bytes.length - 16));
        UserError truncated = assertThrows(UserError.class, () -> SafetensorsReader.open(file));
        assertTrue(truncated.getMessage().contains("'x'"), truncated.getMessage());
        Files.writeString(file, "PK\u0003\u0004 this is a zip");
        assertThrows(UserError.class, () -> SafetensorsReader.open(file));
        assertThrows(UserError.class, () -> SafetensorsReader.open(dir.resolve("absent")));
    }

    private static void writeRaw(Path file, Map<String, String> dtypes, Map<String, short[]> data) throws IOException {
        StringBuilder json = new StringBuilder("{");
        long offset = 0;
        List<String> names = List.copyOf(new java.util.TreeSet<>(data.keySet()));
        for (String name : names) {
            long length = data.get(name).length * 2L;
            if (json.length() > 1) {
                json.append(',');
            }
            json.append('"').append(name).append("\":{\"dtype\":\"").append(dtypes.get(name)).append("\",\"shape\":[")
                    .append(data.get(name).length).append("],\"data_offsets\":[").append(offset).append(',').append(offset + length).append("]}");
            offset += length;
        }
        json.append('}');
        byte[] header = json.toString().getBytes(StandardCharsets.UTF_8);
        ByteBuffer out = ByteBuffer.allocate(8 + header.length + (int) offset).order(ByteOrder.LITTLE_ENDIAN);
        out.putLong(header.length).put(header);
        for (String name : names) {
            for (short s : data.get(name)) {
                out.putShort(s);
            }
        }
        Files.write(file, out.array());
    }
}
