package dev.finetune.adapters;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import java.util.HashMap;
import java.util.Map;

/**
 * Cached 0-dim float constants owned by a long-lived manager.
 *
 * <p>DJL turns a Java {@code Number} operand ({@code x.mul(2f)}) into a temporary tensor that it frees right after
 * the op while autograd still holds it, so gradients turn to garbage after a GC (docs/engine-facts.md). Code that is
 * differentiated must take its constants from here instead.
 */
public final class Scalars {
    private final NDManager owner;
    private final Map<Float, NDArray> cache = new HashMap<>();

    public Scalars(NDManager owner) {
        this.owner = owner;
    }

    /** A float32 0-dim tensor holding {@code value}; lives as long as the owning manager. */
    public synchronized NDArray of(float value) {
        return cache.computeIfAbsent(value, v -> {
            NDArray constant = owner.full(new Shape(), v, DataType.FLOAT32);
            // First use may happen inside a step's NDScope, which would otherwise close the cached constant with the step.
            NDScope.unregister(constant);
            return constant;
        });
    }
}
