package dev.finetune.trainers.model;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ModelConfig;

/**
 * Rotary position embedding in the Hugging Face "rotate half" layout.
 *
 * <p>Only the inverse frequencies are kept; the angles are computed per forward from the position ids in
 * float32, exactly as Hugging Face does, so there is no table to size for 128k contexts and packed sequences
 * (positions restarting inside a row) need nothing special.
 */
public final class RotaryEmbedding {
    /** cos and sin of every position's angles, {@code [B, 1, T, headDim]}, shared by all layers of one forward. */
    public record Angles(NDArray cos, NDArray sin) {}

    private final NDArray inverseFrequencies;

    RotaryEmbedding(ModelConfig config, NDManager manager) {
        float[] frequencies = inverseFrequencies(config, manager);
        inverseFrequencies = manager.create(frequencies);
        NDScope.unregister(inverseFrequencies);
    }

    /** {@code positionIds [B, T]} int64 → angles for {@code [B, H, T, headDim]} queries and keys. */
    public Angles at(NDArray positionIds) {
        NDArray half = positionIds.toType(DataType.FLOAT32, false).expandDims(-1).mul(inverseFrequencies);
        NDArray angles = half.concat(half, -1).expandDims(1);
        return new Angles(angles.cos(), angles.sin());
    }

    /** {@code x·cos + rotate_half(x)·sin} for {@code x [B, H, T, D]}. */
    static NDArray apply(NDArray x, Angles angles) {
        var halves = x.split(2, 3);
        NDArray rotated = halves.get(1).neg().concat(halves.get(0), 3);
        return x.mul(angles.cos()).add(rotated.mul(angles.sin()));
    }

    /**
     * {@code 1 / base ** (2i / d)} with the power taken by torch's float32 kernel, as transformers takes it. That
     * kernel is not correctly rounded: a power computed in double and rounded differs from it in the last bit for
     * about a third of the frequencies of a 64- or 128-wide head (none of stories260K's four), and every rotary
     * angle, so every logit, inherits the difference.
     */
    static float[] inverseFrequencies(ModelConfig config, NDManager manager) {
        int dim = config.headDim();
        float[] exponents = new float[dim / 2];
        for (int i = 0; i < exponents.length; i++) {
            exponents[i] = (float) (2 * i) / dim;
        }
        float[] frequencies;
        try (NDManager scratch = manager.newSubManager()) {
            NDArray base = scratch.full(new ai.djl.ndarray.types.Shape(), (float) config.ropeTheta());
            frequencies = base.pow(scratch.create(exponents)).toFloatArray();
        }
        for (int i = 0; i < frequencies.length; i++) {
            frequencies[i] = 1f / frequencies[i];
        }
        ModelConfig.RopeScaling scaling = config.ropeScaling();
        if (scaling == null || scaling.type().equals("default")) {
            return frequencies;
        }
        switch (scaling.type()) {
            case "linear" -> {
                for (int i = 0; i < frequencies.length; i++) {
                    frequencies[i] = (float) (frequencies[i] / scaling.factor());
                }
            }
            case "llama3" -> llama3(frequencies, scaling);
            default -> throw new UserError("config.json: rope_scaling.rope_type",
                    "rope_scaling type '" + scaling.type() + "' is not supported",
                    "supported: llama3, linear (or none); other scalings change the model's outputs");
        }
        return frequencies;
    }

    /** Llama 3.1's smooth interpolation between scaled low and unscaled high frequencies. */
    private static void llama3(float[] frequencies, ModelConfig.RopeScaling s) {
        double oldContext = s.originalMaxPositionEmbeddings();
        double lowFrequencyWavelength = oldContext / s.lowFreqFactor();
        double highFrequencyWavelength = oldContext / s.highFreqFactor();
        for (int i = 0; i < frequencies.length; i++) {
            double frequency = frequencies[i];
            double wavelength = 2 * Math.PI / frequency;
            double scaled;
            if (wavelength < highFrequencyWavelength) {
                scaled = frequency;
            } else if (wavelength > lowFrequencyWavelength) {
                scaled = frequency / s.factor();
            } else {
                double smooth = (oldContext / wavelength - s.lowFreqFactor()) / (s.highFreqFactor() - s.lowFreqFactor());
                scaled = (1 - smooth) * frequency / s.factor() + smooth * frequency;
            }
            frequencies[i] = (float) scaled;
        }
    }
}
