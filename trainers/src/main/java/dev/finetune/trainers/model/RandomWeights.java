package dev.finetune.trainers.model;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.io.EngineTypes;
import dev.finetune.recipes.model.ModelConfig;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * Freshly initialised weights for an architecture, close to Hugging Face's Llama init: normal(0, 0.02) matrices
 * and biases (HF zeroes biases; random ones let tests see whether biases are applied), unit norms. Drawn in Java from a seed so tests and benchmarks are reproducible on any engine.
 */
public final class RandomWeights {
    private RandomWeights() {}

    public static Map<String, NDArray> create(ModelConfig config, NDManager manager, long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        Map<String, NDArray> weights = new LinkedHashMap<>();
        for (Map.Entry<String, Shape> e : LlamaModel.expectedShapes(config).entrySet()) {
            String name = e.getKey();
            Shape shape = e.getValue();
            float[] values = new float[Math.toIntExact(shape.size())];
            if (name.endsWith("norm.weight")) {
                java.util.Arrays.fill(values, 1f);
            } else {
                for (int i = 0; i < values.length; i++) {
                    values[i] = (float) (nextGaussian(random) * 0.02);
                }
            }
            weights.put(name, EngineTypes.owned(manager, values, shape));
        }
        return weights;
    }

    private static double nextGaussian(SplittableRandom random) {
        // Box-Muller; SplittableRandom has no nextGaussian in Java 17.
        double u = 1.0 - random.nextDouble();
        double v = random.nextDouble();
        return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
    }
}
