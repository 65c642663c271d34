package dev.finetune.adapters.nf4;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.HostArrays;

/**
 * An NF4 weight held by the engine and dequantized on demand, once per forward pass.
 *
 * <p>Dequantization is one table lookup per packed byte: a 256-row table maps each byte straight to its
 * (high, low) pair of code values, so no nibble arithmetic runs at all (the ops have no bit shifts), then one
 * multiply by the block absmax (docs/engine-facts.md: 7.8 ms for 2048×2048).
 */
public final class Nf4Weight {
    private final Shape shape;
    private final long size;
    private final int blockSize;
    private final int blocks;
    private final long storageBytes;
    private final NDArray packed;
    private final NDArray pairTable;
    private final NDArray absmax;
    private final DoubleQuantArrays doubleQuant;

    /** Double-quantized scales on the engine: codes, their table, one absmax per 256 blocks and the mean offset. */
    private record DoubleQuantArrays(NDArray codes, NDArray table, NDArray nestedAbsmax, NDArray offset) {}

    private Nf4Weight(Nf4Quantized quantized, NDManager manager, DataType computeType) {
        this.shape = quantized.shape();
        this.size = quantized.size();
        this.blockSize = quantized.blockSize();
        this.blocks = quantized.blocks();
        this.storageBytes = quantized.storageBytes();
        this.packed = HostArrays.bytes(manager, quantized.packed(), new Shape(quantized.packed().length));
        this.pairTable = HostArrays.floats(manager, pairTable(), new Shape(256, 2), computeType);
        if (quantized.scales() instanceof Nf4Quantized.DoubleQuantScales scales) {
            this.absmax = null;
            int nested = scales.nestedAbsmax().length;
            this.doubleQuant = new DoubleQuantArrays(
                    HostArrays.bytes(manager, scales.codes(), new Shape(scales.codes().length)),
                    HostArrays.floats(manager, Codebook.DYNAMIC_8BIT.codes(), new Shape(256, 1), computeType),
                    HostArrays.floats(manager, scales.nestedAbsmax(), new Shape(nested, 1), computeType),
                    HostArrays.floats(manager, new float[] {scales.offset()}, new Shape(), computeType));
        } else {
            this.absmax = HostArrays.floats(manager, quantized.scales().absmax(), new Shape(blocks, 1), computeType);
            this.doubleQuant = null;
        }
    }

    /** Moves a Java-side quantized weight onto the engine; {@code computeType} is what forward passes receive. */
    public static Nf4Weight upload(Nf4Quantized quantized, NDManager manager, DataType computeType) {
        return new Nf4Weight(quantized, manager, computeType);
    }

    public Shape shape() {
        return shape;
    }

    /** Bytes of the packed codes and scales (the lookup tables, 2 KiB per weight, are not counted). */
    public long storageBytes() {
        return storageBytes;
    }

    /**
     * The full-precision weight, with every temporary attached to {@code target} (the caller's step manager) so
     * nothing piles up in the long-lived manager that holds the packed codes.
     */
    public NDArray dequantize(NDManager target) {
        NDArray indices = packed.toType(DataType.INT32, false);
        indices.attach(target);
        NDArray pairs = JniUtils.embedding((PtNDArray) indices, (PtNDArray) pairTable, false);
        NDArray flat = pairs.reshape(blocks, blockSize).mul(blockAbsmax(target)).reshape(-1);
        if (flat.size() != size) {
            flat = flat.get(new NDIndex("0:" + size));
        }
        return flat.reshape(shape);
    }

    private NDArray blockAbsmax(NDManager target) {
        if (doubleQuant == null) {
            return absmax;
        }
        NDArray codes = doubleQuant.codes().toType(DataType.INT32, false);
        codes.attach(target);
        int nested = (int) doubleQuant.nestedAbsmax().getShape().get(0);
        NDArray centered = JniUtils.embedding((PtNDArray) codes, (PtNDArray) doubleQuant.table(), false)
                .reshape(nested, Nf4Quantized.NESTED_BLOCK_SIZE)
                .mul(doubleQuant.nestedAbsmax())
                .reshape(-1, 1);
        if (centered.getShape().get(0) != blocks) {
            centered = centered.get(new NDIndex("0:" + blocks));
        }
        return centered.add(doubleQuant.offset());
    }

    private static float[] pairTable() {
        float[] table = new float[256 * 2];
        for (int b = 0; b < 256; b++) {
            table[2 * b] = Codebook.NF4.code(b >> 4);
            table[2 * b + 1] = Codebook.NF4.code(b & 0xF);
        }
        return table;
    }
}
