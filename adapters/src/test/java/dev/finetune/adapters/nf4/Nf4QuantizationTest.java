package dev.finetune.adapters.nf4;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.HostArrays;
import dev.finetune.recipes.AdapterSpec;
import java.util.Random;
import org.junit.jupiter.api.Test;

@SuppressWarnings("try") // scopes are held only for their extent
class Nf4QuantizationTest {
    private static final AdapterSpec.Nf4 PLAIN = new AdapterSpec.Nf4(64, false);
    private static final AdapterSpec.Nf4 DOUBLE = new AdapterSpec.Nf4(64, true);

    /** Normal weights with a few large outliers, 37×50 = 1850 values: 28 full blocks and one partial block. */
    private static float[] weights(long seed, int count) {
        Random random = new Random(seed);
        float[] values = new float[count];
        for (int i = 0; i < count; i++) {
            values[i] = (float) (random.nextGaussian() * 0.02);
            if (random.nextInt(100) == 0) {
                values[i] *= 20;
            }
        }
        return values;
    }

    @Test
    void codeTablesAreTheBitsandbytesOnes() {
        float[] nf4 = Codebook.NF4.codes();
        assertEquals(16, nf4.length);
        assertEquals(-1f, nf4[0]);
        assertEquals(0f, nf4[7]);
        assertEquals(1f, nf4[15]);
        float[] dynamic = Codebook.DYNAMIC_8BIT.codes();
        assertEquals(256, dynamic.length);
        assertEquals(1f, dynamic[255]);
        for (int i = 1; i < dynamic.length; i++) {
            assertTrue(dynamic[i] >= dynamic[i - 1], "dynamic map sorted");
        }
        // Smallest positive code: 1e-6 times the mean of the single [0.1, 1] interval.
        float smallestPositive = Float.MAX_VALUE;
        for (float code : dynamic) {
            if (code > 0) {
                smallestPositive = Math.min(smallestPositive, code);
            }
        }
        assertEquals(0.55e-6f, smallestPositive, 1e-12f);
    }

    @Test
    void nearestIsTheClosestCode() {
        Random random = new Random(1);
        for (Codebook book : new Codebook[] {Codebook.NF4, Codebook.DYNAMIC_8BIT}) {
            float[] codes = book.codes();
            for (int trial = 0; trial < 5000; trial++) {
                float value = random.nextFloat() * 2 - 1;
                float best = Float.MAX_VALUE;
                for (float code : codes) {
                    best = Math.min(best, Math.abs(code - value));
                }
                assertEquals(best, Math.abs(codes[book.nearest(value)] - value), 0f);
            }
        }
    }

    @Test
    void plainRoundTripStaysWithinHalfTheCodeGapTimesAbsmax() {
        int count = 37 * 50;
        float[] values = weights(7, count);
        Nf4Quantized quantized = Nf4Quantized.quantize(values, new Shape(37, 50), PLAIN);
        float[] restored = quantized.dequantize();
        float globalHalfGap = (0.6961928009986877f - 1f) / -2f; // widest NF4 gap is between -1 and the next code
        assertEquals(globalHalfGap, Codebook.NF4.maxRoundingError(), 1e-7f);
        for (int i = 0; i < count; i++) {
            float absmax = blockAbsmax(values, i, 64);
            float error = Math.abs(values[i] - restored[i]);
            float local = Codebook.NF4.roundingErrorAt(values[i] / absmax) * absmax;
            assertTrue(error <= local + 1e-6f * absmax, "value " + i + ": error " + error + " > local bound " + local);
            assertTrue(error <= globalHalfGap * absmax + 1e-6f * absmax);
        }
        assertEquals(29 * 32 + 4 * 29, quantized.storageBytes(), "29 blocks of 32 bytes, the last one padded");
    }

    @Test
    void doubleQuantRoundTripAddsAtMostTheAbsmaxCodeError() {
        int count = 300 * 64 + 10; // 301 blocks: two nested blocks of 256, the second partial
        float[] values = weights(11, count);
        Nf4Quantized quantized = Nf4Quantized.quantize(values, new Shape(count), DOUBLE);
        float[] restored = quantized.dequantize();
        int blocks = (count + 63) / 64;
        float[] absmax = new float[blocks];
        double sum = 0;
        for (int b = 0; b < blocks; b++) {
            absmax[b] = blockAbsmax(values, b * 64, 64);
            sum += absmax[b];
        }
        float offset = (float) (sum / blocks);
        float dynamicError = Codebook.DYNAMIC_8BIT.maxRoundingError();
        for (int i = 0; i < count; i++) {
            int block = i / 64;
            float nested = 0;
            for (int j = block / 256 * 256; j < Math.min(blocks, block / 256 * 256 + 256); j++) {
                nested = Math.max(nested, Math.abs(absmax[j] - offset));
            }
            // |x - c·â| ≤ |x - c·a| + |c|·|a - â|, |c| ≤ 1, |a - â| ≤ dynamic-map rounding × nested absmax.
            float absmaxError = dynamicError * nested + 1e-6f * absmax[block];
            float bound = Codebook.NF4.roundingErrorAt(values[i] / absmax[block]) * absmax[block] + absmaxError
                    + 1e-6f * absmax[block];
            float error = Math.abs(values[i] - restored[i]);
            assertTrue(error <= bound, "value " + i + ": error " + error + " > bound " + bound);
        }
        long expectedBytes = (long) blocks * 32 + 2 * 256 + 2 * 4 + 4;
        assertEquals(expectedBytes, quantized.storageBytes());
    }

    @Test
    void engineDequantizationEqualsTheJavaReference() {
        try (NDManager manager = NDManager.newBaseManager()) {
            for (AdapterSpec.Nf4 spec : new AdapterSpec.Nf4[] {PLAIN, DOUBLE}) {
                Shape shape = new Shape(37, 50);
                float[] values = weights(3, (int) shape.size());
                NDArray dense = HostArrays.floats(manager, values, shape, DataType.FLOAT32);
                Nf4Quantized fromEngine = Nf4Quantized.quantize(dense, spec);
                Nf4Quantized fromJava = Nf4Quantized.quantize(values, shape, spec);
                assertArrayEquals(fromJava.packed(), fromEngine.packed());
                Nf4Weight weight = Nf4Weight.upload(fromEngine, manager, DataType.FLOAT32);
                try (NDManager step = manager.newSubManager(); NDScope ignored = new NDScope()) {
                    NDArray restored = weight.dequantize(step);
                    assertEquals(shape, restored.getShape());
                    assertArrayEquals(fromJava.dequantize(), restored.toFloatArray(), 0f);
                }
            }
        }
    }

    private static float blockAbsmax(float[] values, int index, int blockSize) {
        int start = index / blockSize * blockSize;
        float max = 0;
        for (int i = start; i < Math.min(values.length, start + blockSize); i++) {
            max = Math.max(max, Math.abs(values[i]));
        }
        return max;
    }
}
