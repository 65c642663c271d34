package dev.finetune.adapters;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;

/**
 * Arrays built from Java data whose memory belongs to the engine.
 *
 * <p>DJL may wrap a Java buffer without copying it; if that wrapper is closed or collected while autograd or a
 * view still reads the tensor, the engine reads freed memory (docs/engine-facts.md). Long-lived parameters and
 * tables are therefore copied once into engine-owned storage.
 */
public final class HostArrays {
    private HostArrays() {}

    public static NDArray floats(NDManager manager, float[] values, Shape shape, DataType type) {
        ByteBuffer bytes = ByteBuffer.allocateDirect(4 * values.length).order(ByteOrder.nativeOrder());
        FloatBuffer floats = bytes.asFloatBuffer();
        floats.put(values);
        return owned(manager, bytes, shape, DataType.FLOAT32, type);
    }

    public static NDArray bytes(NDManager manager, byte[] values, Shape shape) {
        ByteBuffer bytes = ByteBuffer.allocateDirect(values.length).order(ByteOrder.nativeOrder());
        bytes.put(values).flip();
        return owned(manager, bytes, shape, DataType.UINT8, DataType.UINT8);
    }

    private static NDArray owned(NDManager manager, ByteBuffer data, Shape shape, DataType stored, DataType wanted) {
        try (NDArray wrapped = manager.create(data.rewind(), shape, stored)) {
            // duplicate() and a converting toType() both allocate engine memory, detached from the Java buffer.
            NDArray owned = stored == wanted ? wrapped.duplicate() : wrapped.toType(wanted, true);
            NDScope.unregister(owned);
            return owned;
        }
    }
}
