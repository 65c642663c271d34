package dev.finetune.adapters;

import ai.djl.ndarray.NDArray;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.pytorch.engine.PtNDArray;
import java.util.ArrayList;
import java.util.List;

/**
 * A dense projection: frozen for inference and adapter training, trainable for full fine-tuning.
 *
 * <p>{@code JniUtils.linear} computes {@code x·Wᵀ + b} straight from the Hugging Face {@code [out, in]} layout,
 * so no transposed copy of the weight is ever made.
 */
public final class PlainProjection implements Projection {
    private final String name;
    private final NDArray weight;
    private final NDArray bias;
    private final boolean trainable;

    public PlainProjection(String name, NDArray weight, NDArray bias, boolean trainable) {
        this.name = name;
        this.weight = weight;
        this.bias = bias;
        this.trainable = trainable;
        if (trainable) {
            weight.setRequiresGradient(true);
            if (bias != null) {
                bias.setRequiresGradient(true);
            }
        }
    }

    /** A factory for inference, or for training only the other parameters. */
    public static ProjectionFactory frozenFactory() {
        return (name, weight, bias) -> new PlainProjection(name, weight, bias, false);
    }

    /** A factory for full fine-tuning: every weight and bias is trained. */
    public static ProjectionFactory fullFineTuneFactory() {
        return (name, weight, bias) -> new PlainProjection(name, weight, bias, true);
    }

    @Override
    public String name() {
        return name;
    }

    public NDArray weight() {
        return weight;
    }

    public NDArray bias() {
        return bias;
    }

    @Override
    public NDArray forward(NDArray x) {
        return JniUtils.linear((PtNDArray) x, (PtNDArray) weight, (PtNDArray) bias);
    }

    @Override
    public String script(String x, ScriptArguments arguments) {
        return linear(x, arguments.operand(weight), bias == null ? "None" : arguments.operand(bias));
    }

    /** TorchScript for {@code JniUtils.linear(x, weight, bias)}; {@code bias} may be {@code None}. */
    public static String linear(String x, String weight, String bias) {
        return "torch.linear(" + x + ", " + weight + ", " + bias + ")";
    }

    @Override
    public List<NamedArray> trainable() {
        if (!trainable) {
            return List.of();
        }
        List<NamedArray> params = new ArrayList<>();
        params.add(new NamedArray(name + ".weight", weight));
        if (bias != null) {
            params.add(new NamedArray(name + ".bias", bias));
        }
        return params;
    }
}
