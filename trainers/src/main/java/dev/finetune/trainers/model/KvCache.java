package dev.finetune.trainers.model;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.io.EngineTypes;

/**
 * Keys and values of every layer for {@code capacity} sequence slots, allocated once per generation and filled
 * in place, so each new token costs attention over the past and no copy of it.
 */
public final class KvCache implements AutoCloseable {
    private final NDArray[] keys;
    private final NDArray[] values;
    private final int capacity;
    private int length;

    KvCache(NDManager manager, int layers, int batch, int kvHeads, int capacity, int headDim) {
        this.capacity = capacity;
        keys = new NDArray[layers];
        values = new NDArray[layers];
        Shape shape = new Shape(batch, kvHeads, capacity, headDim);
        for (int i = 0; i < layers; i++) {
            keys[i] = EngineTypes.allocate(manager, shape, DataType.FLOAT32);
            values[i] = EngineTypes.allocate(manager, shape, DataType.FLOAT32);
        }
    }

    /** Slots filled so far. */
    public int length() {
        return length;
    }

    public int capacity() {
        return capacity;
    }

    /** Called once all layers have stored {@code count} new slots. */
    void advance(int count) {
        length += count;
    }

    /** Stores {@code [B, Hkv, T, D]} at the current end and returns views of everything stored so far. */
    NDArray[] append(int layer, NDArray key, NDArray value) {
        int count = (int) key.getShape().get(2);
        if (length + count > capacity) {
            throw new IllegalStateException("KV cache holds " + capacity + " slots; " + (length + count) + " needed");
        }
        NDIndex fresh = new NDIndex(":, :, " + length + ":" + (length + count));
        keys[layer].set(fresh, key);
        values[layer].set(fresh, value);
        NDIndex filled = new NDIndex(":, :, 0:" + (length + count));
        return new NDArray[] {keys[layer].get(filled), values[layer].get(filled)};
    }

    /**
     * The whole key and value buffers of {@code layer}, for a compiled layer that stores {@code count} new slots
     * ending at slot {@code end} in place and attends over slots {@code [0, end)}.
     */
    NDArray[] buffers(int layer, long count, long end) {
        if (end != length + count || end > capacity) {
            throw new IllegalStateException("KV cache holds " + length + " of " + capacity + " slots; " + count
                    + " new ones cannot end at " + end);
        }
        return new NDArray[] {keys[layer], values[layer]};
    }

    /**
     * Fills this cache's rows from {@code source}: row {@code b} gets the slots of source row {@code sourceRows[b]}.
     * Identical prompts (GRPO samples several completions per prompt) are run once and shared this way.
     */
    public void copyRowsFrom(KvCache source, NDArray sourceRows) {
        if (length != 0 || source.length > capacity) {
            throw new IllegalStateException("copying " + source.length + " slots into a cache holding " + length + " of " + capacity);
        }
        NDIndex filled = new NDIndex(":, :, 0:" + source.length);
        NDIndex rows = new NDIndex("{}, :, 0:" + source.length, sourceRows);
        for (int i = 0; i < keys.length; i++) {
            try (NDArray k = source.keys[i].get(rows); NDArray v = source.values[i].get(rows)) {
                keys[i].set(filled, k);
                values[i].set(filled, v);
            }
        }
        length = source.length;
    }

    @Override
    public void close() {
        for (int i = 0; i < keys.length; i++) {
            keys[i].close();
            values[i].close();
        }
    }
}
