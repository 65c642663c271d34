package dev.finetune.recipes.model;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.LoraTargets;
import java.util.ArrayList;
import java.util.List;

/**
 * Every weight tensor of a decoder-only model, counted from its {@link ModelConfig}.
 *
 * <p>The memory model needs more than a total: NF4 quantizes only the decoder's linear layers, 8-bit optimizers keep
 * small tensors in 32 bits, LoRA adapts named projections, FSDP gathers one decoder layer at a time. So the count is
 * kept per tensor, with the Hugging Face name, and every other number is a sum over this list.
 *
 * @param layer the tensors of one decoder layer (all layers are alike)
 * @param layers number of decoder layers
 * @param embedding {@code model.embed_tokens}
 * @param finalNorm {@code model.norm}
 * @param head {@code lm_head}; {@code null} when tied to the embedding
 */
public record ModelParameters(List<Tensor> layer, int layers, Tensor embedding, Tensor finalNorm, Tensor head) {

    /** What a tensor is, which decides how it is stored and trained. */
    public enum Kind {
        /** A projection of a decoder layer ({@code nn.Linear}): quantized by QLoRA, adaptable by LoRA. */
        LINEAR,
        /** A MoE router ({@code nn.Linear} too, but tiny). */
        ROUTER,
        /** RMSNorm scale vectors, including Qwen3's per-head q/k norms. */
        NORM,
        /** q/k/v biases (Qwen2). */
        BIAS,
        /** Token embedding: a lookup table, never quantized. */
        EMBEDDING,
        /** Output projection; bitsandbytes leaves it unquantized. */
        HEAD
    }

    /**
     * One weight, {@code copies} times (MoE experts share a name pattern).
     *
     * @param name Hugging Face name relative to a decoder layer ({@code self_attn.q_proj}) or the model
     * @param in input features (columns) of a linear; the length of a vector
     * @param out output features (rows) of a linear; 1 for a vector
     */
    public record Tensor(String name, Kind kind, long in, long out, int copies) {
        public long numel() {
            return in * out * copies;
        }

        /** The module's own name ({@code q_proj}, {@code w1}), which LoRA target lists use. */
        public String shortName() {
            return name.substring(name.lastIndexOf('.') + 1);
        }

        /** Elements of one copy: what a per-tensor rule (8-bit optimizer threshold) sees. */
        public long numelPerCopy() {
            return in * out;
        }
    }

    /** The tensor list of a config. Fused projections (Phi-3) are kept fused because that is how they are named. */
    public static ModelParameters of(ModelConfig c) {
        long h = c.hiddenSize();
        long q = (long) c.numAttentionHeads() * c.headDim();
        long kv = (long) c.numKeyValueHeads() * c.headDim();
        long inter = c.intermediateSize();
        List<Tensor> layer = new ArrayList<>();
        if (c.modelType().startsWith("phi3")) {
            layer.add(linear("self_attn.qkv_proj", h, q + 2 * kv));
        } else {
            layer.add(linear("self_attn.q_proj", h, q));
            layer.add(linear("self_attn.k_proj", h, kv));
            layer.add(linear("self_attn.v_proj", h, kv));
        }
        layer.add(linear("self_attn.o_proj", q, h));
        if (c.attentionBias()) {
            layer.add(new Tensor("self_attn.q_proj.bias", Kind.BIAS, q, 1, 1));
            layer.add(new Tensor("self_attn.k_proj.bias", Kind.BIAS, kv, 1, 1));
            layer.add(new Tensor("self_attn.v_proj.bias", Kind.BIAS, kv, 1, 1));
        }
        if (c.qkNorm()) {
            layer.add(new Tensor("self_attn.q_norm", Kind.NORM, c.headDim(), 1, 1));
            layer.add(new Tensor("self_attn.k_norm", Kind.NORM, c.headDim(), 1, 1));
        }
        if (c.numLocalExperts() > 0) {
            int e = c.numLocalExperts();
            layer.add(new Tensor("block_sparse_moe.gate", Kind.ROUTER, h, e, 1));
            layer.add(new Tensor("block_sparse_moe.experts.*.w1", Kind.LINEAR, h, inter, e));
            layer.add(new Tensor("block_sparse_moe.experts.*.w2", Kind.LINEAR, inter, h, e));
            layer.add(new Tensor("block_sparse_moe.experts.*.w3", Kind.LINEAR, h, inter, e));
        } else if (c.modelType().startsWith("phi3")) {
            layer.add(linear("mlp.gate_up_proj", h, 2 * inter));
            layer.add(linear("mlp.down_proj", inter, h));
        } else {
            layer.add(linear("mlp.gate_proj", h, inter));
            layer.add(linear("mlp.up_proj", h, inter));
            layer.add(linear("mlp.down_proj", inter, h));
        }
        if (c.mlpBias()) {
            layer.add(new Tensor("mlp.bias", Kind.BIAS, 2 * inter + h, 1, 1));
        }
        for (int i = 0; i < c.normsPerLayer(); i++) {
            layer.add(new Tensor(NORM_NAMES[Math.min(i, NORM_NAMES.length - 1)], Kind.NORM, h, 1, 1));
        }
        Tensor embedding = new Tensor("model.embed_tokens", Kind.EMBEDDING, h, c.vocabSize(), 1);
        Tensor head = c.tieWordEmbeddings() ? null : new Tensor("lm_head", Kind.HEAD, h, c.vocabSize(), 1);
        return new ModelParameters(List.copyOf(layer), c.numHiddenLayers(), embedding,
                new Tensor("model.norm", Kind.NORM, h, 1, 1), head);
    }

    private static final String[] NORM_NAMES = {
        "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"};

    private static Tensor linear(String name, long in, long out) {
        return new Tensor(name, Kind.LINEAR, in, out, 1);
    }

    public long perLayer() {
        return layer.stream().mapToLong(Tensor::numel).sum();
    }

    public long headParams() {
        return head == null ? 0 : head.numel();
    }

    public long total() {
        return embedding.numel() + layers * perLayer() + finalNorm.numel() + headParams();
    }

    /** Parameters in decoder-layer linears over all layers: what NF4 quantizes. */
    public long quantizable() {
        return layers * layer.stream().filter(t -> t.kind() == Kind.LINEAR).mapToLong(Tensor::numel).sum();
    }

    /**
     * Parameters held in tensors smaller than {@code threshold} elements (per copy): bitsandbytes keeps their
     * optimizer state in 32 bits ({@code min_8bit_size}).
     */
    public long inSmallTensors(long threshold) {
        long perLayer = layer.stream().filter(t -> t.numelPerCopy() < threshold).mapToLong(Tensor::numel).sum();
        long rest = 0;
        for (Tensor t : new Tensor[] {embedding, finalNorm, head}) {
            if (t != null && t.numelPerCopy() < threshold) {
                rest += t.numel();
            }
        }
        return layers * perLayer + rest;
    }

    /** The largest single tensor: what a one-tensor-at-a-time save or device-to-host copy stages. */
    public long largestTensor() {
        long max = Math.max(embedding.numel(), headParams());
        for (Tensor t : layer) {
            max = Math.max(max, t.numelPerCopy());
        }
        return max;
    }

    /** The linears LoRA adapts, once per layer (plus {@code lm_head} when named). Empty for a full fine-tune. */
    public List<Tensor> loraTargets(AdapterSpec adapter) {
        if (!(adapter instanceof AdapterSpec.Lora lora)) {
            return List.of();
        }
        LoraTargets targets = LoraTargets.of(lora.targetModules());
        List<Tensor> chosen = new ArrayList<>();
        for (Tensor t : layer) {
            boolean linear = t.kind() == Kind.LINEAR || t.kind() == Kind.ROUTER;
            if (linear && (lora.targetAllLinear() || targets.matches(moduleName(t, 0)))) {
                chosen.add(t);
            }
        }
        if (head != null && targets.matches(head.name())) {
            chosen.add(head);
        }
        return chosen;
    }

    /** The Hugging Face module name of a layer tensor in decoder layer {@code index} (expert 0 for MoE copies). */
    static String moduleName(Tensor t, int index) {
        return "model.layers." + index + "." + t.name().replace("*", "0");
    }

    /**
     * Every linear layer a LoRA target can name, as Hugging Face names it: the decoder layers' projections in every
     * layer and the output head (a module even when its weight is tied).
     */
    public List<String> linearModules() {
        List<String> names = new ArrayList<>();
        for (int i = 0; i < layers; i++) {
            for (Tensor t : layer) {
                if (t.kind() == Kind.LINEAR || t.kind() == Kind.ROUTER) {
                    names.add(moduleName(t, i));
                }
            }
        }
        names.add(head != null ? head.name() : "lm_head");
        return names;
    }

    /**
     * Trainable LoRA parameters: {@code r·(in + out)} per adapted linear (per expert copy), in every layer that has
     * it. {@code lm_head} is counted once.
     */
    public long loraTrainable(AdapterSpec adapter) {
        if (!(adapter instanceof AdapterSpec.Lora lora)) {
            return 0;
        }
        long total = 0;
        for (Tensor t : loraTargets(adapter)) {
            long perCopy = (long) lora.r() * (t.in() + t.out()) * t.copies();
            total += t.kind() == Kind.HEAD ? perCopy : layers * perCopy;
        }
        return total;
    }

    /** Trainable parameters: everything for a full fine-tune, the adapters otherwise. */
    public long trainable(AdapterSpec adapter) {
        return adapter instanceof AdapterSpec.Lora ? loraTrainable(adapter) : total();
    }
}
