package dev.finetune.adapters.nf4;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.recipes.AdapterSpec;
import java.util.stream.IntStream;

/**
 * A weight quantized to NF4 in Java: two 4-bit code indices per byte (first value in the high nibble, as
 * bitsandbytes packs them) and one absmax per block of the flattened weight.
 *
 * <p>The last block is padded with zeros so that every block has the same length; the padding is dropped again
 * when dequantizing.
 *
 * @param shape the original weight shape
 * @param blockSize values per absmax (64 in QLoRA)
 * @param packed {@code blocks × blockSize / 2} bytes
 * @param scales the per-block absmax, plain or double-quantized
 */
public record Nf4Quantized(Shape shape, int blockSize, byte[] packed, Scales scales) {

    /** bitsandbytes quantizes the absmax values in blocks of 256 when double quantization is on. */
    public static final int NESTED_BLOCK_SIZE = 256;

    /** Values converted per Java round trip, so that a huge layer never needs a full float[] on the heap. */
    private static final int CHUNK_BLOCKS = 1 << 14;

    /** The block absmax values as stored. */
    public sealed interface Scales {
        /** The absmax per block as the dequantizer will see it. */
        float[] absmax();

        long storageBytes();
    }

    /** One float32 absmax per block. */
    public record PlainScales(float[] absmax) implements Scales {
        @Override
        public long storageBytes() {
            return 4L * absmax.length;
        }
    }

    /**
     * Double quantization: {@code absmax - offset} stored as 8-bit dynamic-map codes with one float32 absmax per
     * {@link #NESTED_BLOCK_SIZE} blocks; {@code offset} is the mean absmax.
     */
    public record DoubleQuantScales(byte[] codes, float[] nestedAbsmax, float offset, int blocks) implements Scales {
        @Override
        public float[] absmax() {
            float[] absmax = new float[blocks];
            for (int i = 0; i < blocks; i++) {
                float code = Codebook.DYNAMIC_8BIT.code(codes[i] & 0xFF);
                absmax[i] = code * nestedAbsmax[i / NESTED_BLOCK_SIZE] + offset;
            }
            return absmax;
        }

        @Override
        public long storageBytes() {
            return codes.length + 4L * nestedAbsmax.length + 4L;
        }

        /** The largest error of a reconstructed absmax in the given block, from the code table alone. */
        public float absmaxErrorBound(int block) {
            return Codebook.DYNAMIC_8BIT.maxRoundingError() * nestedAbsmax[block / NESTED_BLOCK_SIZE];
        }
    }

    public long size() {
        return shape.size();
    }

    public int blocks() {
        return packed.length * 2 / blockSize;
    }

    /** Bytes held by the quantized form (codes and scales). */
    public long storageBytes() {
        return packed.length + scales.storageBytes();
    }

    /** Quantizes a float weight of any shape (float16/32/64 read as float32), streaming it in chunks. */
    @SuppressWarnings("try") // the scope only collects the chunk temporaries
    public static Nf4Quantized quantize(NDArray weight, AdapterSpec.Nf4 spec) {
        long size = weight.size();
        Builder builder = new Builder(weight.getShape(), spec.blockSize());
        try (NDScope ignored = new NDScope()) {
            NDArray flat = weight.reshape(-1);
            long chunk = (long) CHUNK_BLOCKS * spec.blockSize();
            for (long start = 0; start < size; start += chunk) {
                long end = Math.min(size, start + chunk);
                NDArray slice = flat.get(new NDIndex(start + ":" + end));
                builder.add(slice.toType(DataType.FLOAT32, false).toFloatArray());
            }
        }
        return builder.finish(spec.doubleQuant());
    }

    /** Quantizes values held in Java; {@code values.length} must equal the shape's size. */
    public static Nf4Quantized quantize(float[] values, Shape shape, AdapterSpec.Nf4 spec) {
        if (values.length != shape.size()) {
            throw new IllegalArgumentException(values.length + " values for shape " + shape);
        }
        Builder builder = new Builder(shape, spec.blockSize());
        builder.add(values);
        return builder.finish(spec.doubleQuant());
    }

    /** The reference dequantization in Java, {@code code × absmax}, in the original flattened order. */
    public float[] dequantize() {
        float[] absmax = scales.absmax();
        float[] out = new float[Math.toIntExact(size())];
        for (int i = 0; i < out.length; i++) {
            int nibble = (i & 1) == 0 ? (packed[i >> 1] >> 4) & 0xF : packed[i >> 1] & 0xF;
            out[i] = Codebook.NF4.code(nibble) * absmax[i / blockSize];
        }
        return out;
    }

    /** Quantizes blocks as the values arrive; chunks must hold whole blocks except the last. */
    private static final class Builder {
        private final Shape shape;
        private final int blockSize;
        private final byte[] packed;
        private final float[] absmax;
        private long position;

        Builder(Shape shape, int blockSize) {
            if (blockSize <= 0 || blockSize % 2 != 0) {
                throw new IllegalArgumentException("NF4 block size must be even and positive, got " + blockSize);
            }
            long blocks = (shape.size() + blockSize - 1) / blockSize;
            long bytes = blocks * blockSize / 2;
            if (bytes > Integer.MAX_VALUE - 8) {
                throw new IllegalArgumentException("weight " + shape + " is too large to pack in one array");
            }
            this.shape = shape;
            this.blockSize = blockSize;
            this.packed = new byte[(int) bytes];
            this.absmax = new float[(int) blocks];
        }

        /** Blocks are independent and own whole bytes (even block size), so they are packed in parallel. */
        void add(float[] values) {
            int firstBlock = (int) (position / blockSize);
            int count = (values.length + blockSize - 1) / blockSize;
            IntStream.range(0, count).parallel().forEach(k -> packBlock(values, k * blockSize, firstBlock + k));
            position += (long) count * blockSize;
        }

        private void packBlock(float[] values, int offset, int block) {
            int length = Math.min(blockSize, values.length - offset);
            float max = 0f;
            for (int j = 0; j < length; j++) {
                max = Math.max(max, Math.abs(values[offset + j]));
            }
            absmax[block] = max;
            int zeroCode = Codebook.NF4.nearest(0f);
            int at = (int) ((long) block * blockSize / 2);
            for (int j = 0; j < blockSize; j += 2) {
                int high = j < length && max > 0f ? Codebook.NF4.nearest(values[offset + j] / max) : zeroCode;
                int low = j + 1 < length && max > 0f ? Codebook.NF4.nearest(values[offset + j + 1] / max) : zeroCode;
                packed[at + j / 2] = (byte) (high << 4 | low);
            }
        }

        Nf4Quantized finish(boolean doubleQuant) {
            Scales scales = doubleQuant ? doubleQuantize(absmax) : new PlainScales(absmax);
            return new Nf4Quantized(shape, blockSize, packed, scales);
        }

        private static DoubleQuantScales doubleQuantize(float[] absmax) {
            double sum = 0;
            for (float value : absmax) {
                sum += value;
            }
            float offset = (float) (sum / absmax.length);
            int nested = (absmax.length + NESTED_BLOCK_SIZE - 1) / NESTED_BLOCK_SIZE;
            float[] nestedAbsmax = new float[nested];
            byte[] codes = new byte[nested * NESTED_BLOCK_SIZE];
            int zeroCode = Codebook.DYNAMIC_8BIT.nearest(0f);
            for (int n = 0; n < nested; n++) {
                int start = n * NESTED_BLOCK_SIZE;
                int end = Math.min(absmax.length, start + NESTED_BLOCK_SIZE);
                float max = 0f;
                for (int i = start; i < end; i++) {
                    max = Math.max(max, Math.abs(absmax[i] - offset));
                }
                nestedAbsmax[n] = max;
                for (int i = start; i < start + NESTED_BLOCK_SIZE; i++) {
                    int code = i < end && max > 0f ? Codebook.DYNAMIC_8BIT.nearest((absmax[i] - offset) / max) : zeroCode;
                    codes[i] = (byte) code;
                }
            }
            return new DoubleQuantScales(codes, nestedAbsmax, offset, absmax.length);
        }
    }
}
