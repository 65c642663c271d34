package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.model.Family;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters.LayerGroup;
import dev.finetune.recipes.model.ModelParameters.Tensor;
import dev.finetune.recipes.model.ModelParameters;
import java.util.EnumMap;
import java.util.Map;

/**
 * What autograd keeps per token for one decoder layer: the tensor-by-tensor count of docs/memory-plan.md (activations),
 * apart from the per-device sums in {@link MemoryModel} because it depends only on the layer's shape, its kernels and
 * which projections carry adapters.
 */
public final class LayerActivations {

    private LayerActivations() {}

    /**
     * Bytes autograd keeps per token for one decoder layer (docs/memory-plan.md: activations; counted tensor by
     * tensor for Llama-style blocks). What a layer keeps depends on what is trained: a linear layer keeps its input
     * only to compute its weight's gradient, so a frozen projection keeps nothing (its input gradient needs only the
     * weight), and a frozen RMSNorm scale keeps no normalized copy. A full fine-tune with {@code act} = 2 keeps
     * 22h + 4h_kv + 8I in the eager form and 12h + 4h_kv + 6I in the fused form, which the anchors calibrate against
     * torchtune's Llama-3.2-3B ladder to ±15 %.
     *
     * <ul>
     *   <li>always, eager: each RMSNorm's fp32-upcast input (4 B, kept by its pow and mul); the q, k, v and output
     *       SDPA keeps; the SwiGLU's gate (for silu), silu(gate) and up (for their product).
     *   <li>always, fused: norms keep a 16-bit input; SDPA as above; SwiGLU keeps gate and up and recomputes silu.
     *   <li>both: the fp32 log-sum-exp per head that SDPA/FlashAttention keeps instead of the s² score matrix.
     *   <li>full fine-tune: every linear's input (q/k/v input, o_proj input, MLP input, down_proj input; in the
     *       fused form o_proj reads the attention output already kept) and, eager, each norm's 16-bit output.
     *   <li>LoRA: the r-wide {@code x·A} per adapted linear and its input: one copy shared by the projections that
     *       read the same tensor, or, when the adapters run in a wider dtype than the activations (PEFT's fp32
     *       adapters under autocast, {@code castPerAdapter}), a cast copy per adapted linear; with dropout a dropped
     *       copy plus a 1-byte mask per adapted linear instead.
     *   <li>MoE: intermediate tensors per routed expert (and the shared expert's), the gathered expert inputs, fp32
     *       router logits.
     *   <li>q/k norms (Qwen3, Gemma 3, OLMo 2): their inputs, as the layer norms keep theirs.
     * </ul>
     */
    public static long bytesPerToken(ModelConfig c, Kernels.Layers layers, int act, AdapterSpec adapter,
            boolean castPerAdapter) {
        long most = 0;
        for (LayerGroup g : c.parameters().groups()) {
            most = Math.max(most, bytesPerToken(c, g, layers, act, adapter, castPerAdapter));
        }
        return most;
    }

    /** {@link #bytesPerToken} summed over every decoder layer (layers differ in Qwen-MoE's dense {@code mlp_only_layers}). */
    public static long allLayers(ModelConfig c, Kernels.Layers layers, int act, AdapterSpec adapter, boolean castPerAdapter) {
        long sum = 0;
        for (LayerGroup g : c.parameters().groups()) {
            sum += g.count() * bytesPerToken(c, g, layers, act, adapter, castPerAdapter);
        }
        return sum;
    }

    private static long bytesPerToken(ModelConfig c, LayerGroup group, Kernels.Layers layers, int act, AdapterSpec adapter,
            boolean castPerAdapter) {
        long h = c.hiddenSize();
        long hq = (long) c.numAttentionHeads() * c.headDim();
        long hkv = (long) c.numKeyValueHeads() * c.headDim();
        boolean sparse = group.tensors().stream().anyMatch(t -> t.kind() == ModelParameters.Kind.EXPERTS);
        int routed = sparse ? c.experts().perToken() : 1;
        long shared = sparse ? c.experts().sharedIntermediateSize() : 0;
        long inter = sparse ? (long) c.experts().intermediateSize() * routed + shared : c.intermediateSize();
        long norms = c.normsPerLayer();
        long attention = act * (2 * hq + 2 * hkv);
        long bytes = switch (layers) {
            case EAGER -> norms * 4 * h + attention + act * 3 * inter;
            case FUSED -> norms * act * h + attention + act * 2 * inter;
        };
        bytes += 4L * c.numAttentionHeads();
        if (c.qkNorm() != Family.QkNorm.NONE) {
            // the q/k norms keep their input like the layer norms (a per-head norm normalises the same elements)
            bytes += (layers == Kernels.Layers.EAGER ? 4 : act) * (hq + hkv);
        }
        if (sparse) {
            // each token's copy for every expert it is routed to, and the fp32 router logits
            bytes += act * h * routed + 4L * c.experts().count();
        }
        if (!(adapter instanceof AdapterSpec.Lora lora)) {
            long linearInputs = act * (h + h + inter) + (layers == Kernels.Layers.EAGER ? act * hq : 0);
            long normOutputs = layers == Kernels.Layers.EAGER ? norms * act * h : 0;
            return bytes + linearInputs + normOutputs;
        }
        Map<Input, Long> sharedInputs = new EnumMap<>(Input.class);
        for (Tensor t : c.parameters().loraTargets(adapter)) {
            if (t.kind() == ModelParameters.Kind.HEAD || !group.tensors().contains(t)) {
                continue;
            }
            long copies = t.copies() > 1 ? routed : 1;
            bytes += copies * act * lora.r();
            if (lora.dropout() > 0) {
                bytes += copies * (act + 1) * t.in();
            } else if (castPerAdapter) {
                bytes += copies * act * t.in();
            } else if (t.copies() == 1) {
                // Expert inputs are the gathered copies the MoE term already counts.
                sharedInputs.merge(Input.of(t), t.in(), Math::max);
            }
        }
        for (Map.Entry<Input, Long> e : sharedInputs.entrySet()) {
            boolean keptByAttention = e.getKey() == Input.ATTENTION_OUTPUT && layers == Kernels.Layers.FUSED;
            bytes += keptByAttention ? 0 : act * e.getValue();
        }
        return bytes;
    }

    /** The tensors a decoder layer's projections read: projections reading the same one share its saved copy. */
    private enum Input {
        ATTENTION_INPUT, ATTENTION_OUTPUT, MLP_INPUT, MLP_ACTIVATION;

        static Input of(Tensor t) {
            String n = t.shortName();
            if (t.name().startsWith("self_attn.")) {
                return n.equals("o_proj") ? ATTENTION_OUTPUT : ATTENTION_INPUT;
            }
            return n.equals("down_proj") ? MLP_ACTIVATION : MLP_INPUT;
        }
    }

    /**
     * PEFT keeps adapters in fp32 when the model is 16-bit (the mixed regime), and each adapted linear casts its input
     * to the adapter's dtype, so under autocast every adapter saves its own 16-bit copy of the input.
     */
    static boolean castsPerAdapter(PrecisionRegime r) {
        return r == PrecisionRegime.MIXED_FP32_MASTER;
    }
}
