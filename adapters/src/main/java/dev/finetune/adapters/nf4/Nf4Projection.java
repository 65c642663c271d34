package dev.finetune.adapters.nf4;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.ScriptArguments;
import dev.finetune.recipes.AdapterSpec;
import java.util.List;

/** A frozen linear layer whose weight is stored as NF4 and dequantized inside every forward pass. */
public final class Nf4Projection implements Projection {
    private final String name;
    private final Nf4Weight weight;
    private final NDArray bias;

    public Nf4Projection(String name, Nf4Weight weight, NDArray bias) {
        this.name = name;
        this.weight = weight;
        this.bias = bias;
    }

    /**
     * Quantizes {@code denseWeight} into {@code manager} and closes it: keeping the float copy would cost eight
     * times the memory QLoRA exists to save. The bias stays in full precision, as bitsandbytes keeps it.
     */
    public static Nf4Projection quantize(
            String name, NDArray denseWeight, NDArray bias, AdapterSpec.Nf4 spec, NDManager manager) {
        Nf4Quantized quantized = Nf4Quantized.quantize(denseWeight, spec);
        Nf4Weight weight = Nf4Weight.upload(quantized, manager, denseWeight.getDataType());
        denseWeight.close();
        return new Nf4Projection(name, weight, bias);
    }

    @Override
    public String name() {
        return name;
    }

    public Nf4Weight weight() {
        return weight;
    }

    public NDArray bias() {
        return bias;
    }

    @Override
    public NDArray forward(NDArray x) {
        NDArray dense = weight.dequantize(x.getManager());
        return JniUtils.linear((PtNDArray) x, (PtNDArray) dense, (PtNDArray) bias);
    }

    @Override
    public String script(String x, ScriptArguments arguments) {
        NDArray dense = weight.dequantize(arguments.manager());
        return PlainProjection.linear(x, arguments.operand(dense), bias == null ? "None" : arguments.operand(bias));
    }

    @Override
    public List<NamedArray> trainable() {
        return List.of();
    }
}
