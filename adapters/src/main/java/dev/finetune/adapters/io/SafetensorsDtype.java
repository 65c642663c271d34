package dev.finetune.adapters.io;

import ai.djl.ndarray.types.DataType;

/**
 * The element types we read from or write to safetensors files, with the engine type each becomes in memory.
 *
 * <p>Half-precision floats on disk become float32 arrays: the engine aborts the JVM on any BFLOAT16 array, and
 * float16 matrix products on the CPU are many times slower than float32 (docs/engine-facts.md).
 */
public enum SafetensorsDtype {
    F32(4, DataType.FLOAT32),
    F16(2, DataType.FLOAT32),
    BF16(2, DataType.FLOAT32),
    I64(8, DataType.INT64),
    I32(4, DataType.INT32);

    private final int bytes;
    private final DataType inMemory;

    SafetensorsDtype(int bytes, DataType inMemory) {
        this.bytes = bytes;
        this.inMemory = inMemory;
    }

    /** Bytes per element on disk. */
    public int bytes() {
        return bytes;
    }

    /** The engine type an array read from this dtype has. */
    public DataType inMemory() {
        return inMemory;
    }

    /** Whether reading needs element-wise conversion in Java rather than a plain byte copy. */
    boolean widened() {
        return this == F16 || this == BF16;
    }

    /** The header spelling, or {@code null} when we do not handle it. */
    static SafetensorsDtype parse(String name) {
        for (SafetensorsDtype d : values()) {
            if (d.name().equals(name)) {
                return d;
            }
        }
        return null;
    }
}
