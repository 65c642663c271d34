package dev.finetune.adapters.lora;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.ProjectionFactory;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

/** Two projections with a tanh between them, built through a factory exactly as the model builds its layers. */
public final class TinyNet {
    public static final String UP = "model.layers.0.mlp.up_proj";
    public static final String DOWN = "model.layers.0.mlp.down_proj";

    public final Projection up;
    public final Projection down;

    public TinyNet(ProjectionFactory factory, Map<String, NDArray> weights) {
        up = factory.create(UP, weights.get(UP + ".weight"), weights.get(UP + ".bias"));
        down = factory.create(DOWN, weights.get(DOWN + ".weight"), null);
    }

    public NDArray forward(NDArray x) {
        return down.forward(up.forward(x).tanh());
    }

    public List<NamedArray> trainable() {
        List<NamedArray> all = new ArrayList<>(up.trainable());
        all.addAll(down.trainable());
        return all;
    }

    /** Base weights in HF names: up [hidden, in] with bias, down [out, hidden]. */
    public static Map<String, NDArray> baseWeights(NDManager manager, int in, int hidden, int out, long seed,
            DataType type) {
        Map<String, NDArray> weights = new LinkedHashMap<>();
        weights.put(UP + ".weight", random(manager, new Shape(hidden, in), seed, 0.3, type));
        weights.put(UP + ".bias", random(manager, new Shape(hidden), seed + 1, 0.1, type));
        weights.put(DOWN + ".weight", random(manager, new Shape(out, hidden), seed + 2, 0.3, type));
        return weights;
    }

    public static NDArray random(NDManager manager, Shape shape, long seed, double scale, DataType type) {
        Random random = new Random(seed);
        double[] values = new double[Math.toIntExact(shape.size())];
        for (int i = 0; i < values.length; i++) {
            values[i] = random.nextGaussian() * scale;
        }
        return manager.create(values, shape).toType(type, true);
    }

    /** Copies every array so a factory that takes ownership (QLoRA closes dense weights) cannot touch the original. */
    public static Map<String, NDArray> copy(Map<String, NDArray> weights) {
        Map<String, NDArray> copy = new LinkedHashMap<>();
        weights.forEach((name, array) -> copy.put(name, array.duplicate()));
        return copy;
    }

    /** Gives every B a random value: with PEFT's B = 0 start, A's gradient and the adapter's effect are zero. */
    public void randomizeB(long seed) {
        for (NamedArray param : trainable()) {
            if (param.name().endsWith("lora_B.weight")) {
                NDArray b = param.array();
                NDArray values = random(b.getManager(), b.getShape(), seed++, 0.5, DataType.FLOAT64);
                if (b.getDataType() == DataType.FLOAT64) {
                    b.set(values.toDoubleArray());
                } else {
                    b.set(values.toType(DataType.FLOAT32, false).toFloatArray());
                }
            }
        }
    }
}
