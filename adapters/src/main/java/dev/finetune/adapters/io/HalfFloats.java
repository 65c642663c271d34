package dev.finetune.adapters.io;

/**
 * Bit-exact conversions between float32 and the two 16-bit float formats, done in Java so that no 16-bit array
 * ever reaches the engine. Java 17 has no {@code Float.float16ToFloat}.
 */
public final class HalfFloats {
    private HalfFloats() {}

    /** bfloat16 is the upper half of a float32, so widening is exact. */
    public static float bf16ToFloat(short bits) {
        return Float.intBitsToFloat((bits & 0xFFFF) << 16);
    }

    /** Rounds to nearest, ties to even, as PyTorch's {@code .to(torch.bfloat16)} does; NaN stays NaN. */
    public static short floatToBf16(float value) {
        int bits = Float.floatToRawIntBits(value);
        if (Float.isNaN(value)) {
            return (short) ((bits >>> 16) | 0x0040);
        }
        int roundingBias = 0x7FFF + ((bits >>> 16) & 1);
        return (short) ((bits + roundingBias) >>> 16);
    }

    public static float f16ToFloat(short half) {
        int h = half & 0xFFFF;
        int sign = (h & 0x8000) << 16;
        int exponent = (h >>> 10) & 0x1F;
        int mantissa = h & 0x3FF;
        if (exponent == 0x1F) {
            return Float.intBitsToFloat(sign | 0x7F800000 | (mantissa << 13));
        }
        if (exponent == 0) {
            if (mantissa == 0) {
                return Float.intBitsToFloat(sign);
            }
            // Subnormal half: value = mantissa · 2^-24, exactly representable as a normal float.
            float magnitude = mantissa * 0x1p-24f;
            return sign == 0 ? magnitude : -magnitude;
        }
        return Float.intBitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
    }

    /** Rounds to nearest, ties to even; overflow becomes infinity, underflow a subnormal or zero. */
    public static short floatToF16(float value) {
        int bits = Float.floatToRawIntBits(value);
        int sign = (bits >>> 16) & 0x8000;
        int exponent = (bits >>> 23) & 0xFF;
        int mantissa = bits & 0x7FFFFF;
        if (exponent == 0xFF) {
            return (short) (sign | 0x7C00 | (mantissa != 0 ? 0x200 : 0));
        }
        int halfExponent = exponent - 127 + 15;
        if (halfExponent >= 0x1F) {
            return (short) (sign | 0x7C00);
        }
        if (halfExponent <= 0) {
            if (halfExponent < -10) {
                return (short) sign;
            }
            int full = mantissa | 0x800000;
            int shift = 14 - halfExponent;
            int rounded = roundShift(full, shift);
            return (short) (sign | rounded);
        }
        int rounded = roundShift((halfExponent << 23) | mantissa, 13);
        // A carry out of the mantissa correctly bumps the exponent, up to infinity.
        return (short) (sign | Math.min(rounded, 0x7C00));
    }

    private static int roundShift(int value, int shift) {
        int truncated = value >>> shift;
        int remainder = value & ((1 << shift) - 1);
        int half = 1 << (shift - 1);
        if (remainder > half || (remainder == half && (truncated & 1) == 1)) {
            truncated++;
        }
        return truncated;
    }
}
