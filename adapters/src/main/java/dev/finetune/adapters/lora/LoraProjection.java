package dev.finetune.adapters.lora;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.HostArrays;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.ScriptArguments;
import dev.finetune.adapters.peft.PeftNames;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.SplittableRandom;

/**
 * A frozen base projection plus a trainable low-rank update:
 * {@code y = base(x) + (dropout(x)·Aᵀ·scaling)·Bᵀ}, with {@code A [r, in]} and {@code B [out, r]}.
 *
 * <p>The scaling multiplies the rank-r intermediate rather than the {@code [.., out]} result: the same product,
 * on a tensor {@code out/r} times smaller. It is a cached tensor, never a Java number (docs/engine-facts.md).
 */
public final class LoraProjection implements Projection {
    private final Projection base;
    private final NDArray a;
    private final NDArray b;
    private final double scaling;
    private final NDArray scalingTensor;
    private final double dropout;
    private final AdapterSwitch adapters;
    private NDArray frozenA;
    private NDArray frozenB;

    /**
     * @param base the frozen projection (dense or NF4); its own {@link #trainable()} must be empty
     * @param a {@code [r, in]}, b {@code [out, r]}: both become trainable
     * @param scalingTensor a 0-dim tensor holding {@code scaling}, owned by a long-lived manager
     */
    public LoraProjection(
            Projection base, NDArray a, NDArray b, double scaling, NDArray scalingTensor, double dropout,
            AdapterSwitch adapters) {
        this.base = base;
        this.a = a;
        this.b = b;
        this.scaling = scaling;
        this.scalingTensor = scalingTensor;
        this.dropout = dropout;
        this.adapters = adapters;
        a.setRequiresGradient(true);
        b.setRequiresGradient(true);
    }

    /**
     * PEFT's default A: U(-1/√in, 1/√in), which is Kaiming-uniform with a = √5 as nn.Linear does it. (B starts at
     * zero, so training starts exactly at the base model.) The values depend only on {@code seed} and the layer
     * name, so they do not change when layers are built in another order.
     */
    public static NDArray initialA(String name, int rank, long in, long seed, NDManager manager, DataType type) {
        SplittableRandom random = new SplittableRandom(seed ^ stableHash(name));
        double bound = 1.0 / Math.sqrt(in);
        float[] values = new float[Math.toIntExact(rank * in)];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) ((random.nextDouble() * 2 - 1) * bound);
        }
        return HostArrays.floats(manager, values, new Shape(rank, in), type);
    }

    @Override
    public String name() {
        return base.name();
    }

    public Projection base() {
        return base;
    }

    public NDArray loraA() {
        return a;
    }

    public NDArray loraB() {
        return b;
    }

    public double scaling() {
        return scaling;
    }

    /**
     * Keeps a copy of the current A and B, outside any graph, for {@link AdapterSwitch#reference()}: TRL's frozen
     * "ref" adapter when training continues a saved one.
     */
    void freezeReference(NDManager manager) {
        boolean gradMode = JniUtils.isGradMode();
        JniUtils.setGradMode(false);
        try (NDArray detachedA = a.stopGradient(); NDArray detachedB = b.stopGradient()) {
            frozenA = detachedA.duplicate();
            frozenB = detachedB.duplicate();
        } finally {
            JniUtils.setGradMode(gradMode);
        }
        frozenA.attach(manager);
        frozenB.attach(manager);
        ai.djl.ndarray.NDScope.unregister(frozenA, frozenB);
    }

    @Override
    public NDArray forward(NDArray x) {
        NDArray y = base.forward(x);
        if (!adapters.enabled() || (adapters.referencing() && frozenA == null)) {
            return y;
        }
        if (adapters.referencing()) {
            NDArray low = JniUtils.linear((PtNDArray) x, (PtNDArray) frozenA, null).mul(scalingTensor);
            return y.add(JniUtils.linear((PtNDArray) low, (PtNDArray) frozenB, null));
        }
        NDArray input = adapters.training() && dropout > 0
                ? JniUtils.dropout((PtNDArray) x, dropout, true)
                : x;
        NDArray low = JniUtils.linear((PtNDArray) input, (PtNDArray) a, null).mul(scalingTensor);
        return y.add(JniUtils.linear((PtNDArray) low, (PtNDArray) b, null));
    }

    @Override
    public String script(String x, ScriptArguments arguments) {
        return scriptWithAdapter(x, base.script(x, arguments), arguments, false);
    }

    /**
     * PEFT's order, {@code base(x) + B(A(dropout(x)))·scaling}: the scaling multiplies the {@code [.., out]} result,
     * not the rank-r intermediate. The product is the same but not its rounding unless the scaling is a power of
     * two (alpha 6, r 4: logits 1.1e-5 from PEFT's, bitwise equal in this order).
     */
    @Override
    public NDArray infer(NDArray x) {
        NDArray y = base.infer(x);
        if (!adapters.enabled() || (adapters.referencing() && frozenA == null)) {
            return y;
        }
        boolean referencing = adapters.referencing();
        NDArray input = !referencing && adapters.training() && dropout > 0
                ? JniUtils.dropout((PtNDArray) x, dropout, true)
                : x;
        NDArray low = JniUtils.linear((PtNDArray) input, (PtNDArray) (referencing ? frozenA : a), null);
        return y.add(JniUtils.linear((PtNDArray) low, (PtNDArray) (referencing ? frozenB : b), null).mul(scalingTensor));
    }

    @Override
    public String inferScript(String x, ScriptArguments arguments) {
        return scriptWithAdapter(x, base.inferScript(x, arguments), arguments, true);
    }

    /**
     * {@code y} plus the adapter's term as TorchScript source. Training scales the rank-r intermediate;
     * inference scales the output, in PEFT's order (see {@link #infer}).
     */
    private String scriptWithAdapter(String x, String y, ScriptArguments arguments, boolean scaleOutput) {
        if (y == null || !adapters.enabled() || (adapters.referencing() && frozenA == null)) {
            return y;
        }
        boolean referencing = adapters.referencing();
        String input = !referencing && adapters.training() && dropout > 0
                ? "torch.dropout(" + x + ", " + dropout + ", True)"
                : x;
        // the arguments are named in the order they are first used, so each order keeps its own sequence
        String low = PlainProjection.linear(input, arguments.operand(referencing ? frozenA : a), "None");
        if (!scaleOutput) {
            low = "torch.mul(" + low + ", " + arguments.tensor(scalingTensor) + ")";
            // B's product accumulated by the GEMM into the base's fresh output (C += low·Bᵀ, beta 1): no
            // [tokens, out] temporary and no add pass. The base output is saved by no backward, so writing into
            // it is safe; the sum is the add's, rounded once either way (C + acc).
            return y + ".addmm_(" + low + ", torch.t(" + arguments.operand(referencing ? frozenB : b) + "))";
        }
        String up = PlainProjection.linear(low, arguments.operand(referencing ? frozenB : b), "None");
        return "torch.add(" + y + ", torch.mul(" + up + ", " + arguments.tensor(scalingTensor) + "))";
    }

    @Override
    public List<NamedArray> trainable() {
        return List.of(
                new NamedArray(PeftNames.loraA(name()), a),
                new NamedArray(PeftNames.loraB(name()), b));
    }

    /** 64-bit FNV-1a of the UTF-8 name: stable across JVMs, unlike identity hashes. */
    private static long stableHash(String name) {
        long hash = 0xcbf29ce484222325L;
        for (byte c : name.getBytes(StandardCharsets.UTF_8)) {
            hash ^= c & 0xFF;
            hash *= 0x100000001b3L;
        }
        return hash;
    }
}
