package dev.finetune.adapters.io;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

/**
 * The one gate through which our code allocates or converts arrays by element type.
 *
 * <p>The PyTorch engine's JNI knows no BFLOAT16: creating or converting to one aborts the whole JVM, with no
 * exception to catch. Routing every typed allocation through here turns that into an ordinary exception.
 */
public final class EngineTypes {
    private EngineTypes() {}

    /** Returns {@code type} unless the engine cannot hold it. */
    public static DataType checked(DataType type) {
        if (type == DataType.BFLOAT16) {
            throw new IllegalArgumentException(
                    "refusing to create a BFLOAT16 array: the PyTorch engine aborts the JVM on them; widen to FLOAT32 in Java");
        }
        return type;
    }

    /** An uninitialised array owned by libtorch (not by a Java buffer), so closing it frees it at once. */
    public static NDArray allocate(NDManager manager, Shape shape, DataType type) {
        return manager.create(shape, checked(type));
    }

    /**
     * An array holding a copy of {@code values} in libtorch-owned memory. {@code manager.create(float[])} instead
     * wraps a Java direct buffer that the garbage collector frees on its own schedule, and results that alias it
     * (even {@code toType(.., true)} of the same type) then read freed memory.
     */
    public static NDArray owned(NDManager manager, float[] values, Shape shape) {
        if (shape.size() != values.length) {
            throw new IllegalArgumentException(values.length + " values do not fill shape " + shape);
        }
        NDArray array = allocate(manager, shape, DataType.FLOAT32);
        array.toByteBuffer(true).order(java.nio.ByteOrder.LITTLE_ENDIAN).asFloatBuffer().put(values);
        return array;
    }

    /** {@code array.toType(type, false)} behind the guard. */
    public static NDArray convert(NDArray array, DataType type) {
        return array.toType(checked(type), false);
    }
}
