package dev.finetune.recipes.model;

import dev.finetune.recipes.model.ModelParameters.Kind;
import dev.finetune.recipes.model.ModelParameters.Tensor;
import java.util.ArrayList;
import java.util.List;

/**
 * The anatomy of one decoder layer, family by family: its projections (fused or not), biases, q/k norms, MLP or
 * experts and layer norms, with the names and shapes transformers gives them. Apart from {@link ModelParameters},
 * which only sums over these lists, because this is the one place a family's layer is written down: a new family's
 * tensors are added here and every count (memory, LoRA, FSDP units) follows.
 */
final class LayerTensors {

    private LayerTensors() {}

    /** One decoder layer's tensors, in the order transformers registers them; {@code sparse}: with experts. */
    static List<Tensor> of(ModelConfig c, boolean sparse) {
        Family f = c.family();
        long h = c.hiddenSize();
        long q = (long) c.numAttentionHeads() * c.headDim();
        long kv = (long) c.numKeyValueHeads() * c.headDim();
        List<Tensor> layer = new ArrayList<>();
        if (f.fusedQkv()) {
            layer.add(linear("self_attn.qkv_proj", h, q + 2 * kv));
        } else {
            layer.add(linear("self_attn.q_proj", h, q));
            layer.add(linear("self_attn.k_proj", h, kv));
            layer.add(linear("self_attn.v_proj", h, kv));
        }
        layer.add(linear("self_attn.o_proj", q, h));
        if (c.attentionBias()) {
            layer.add(bias("self_attn.q_proj.bias", q));
            layer.add(bias("self_attn.k_proj.bias", kv));
            layer.add(bias("self_attn.v_proj.bias", kv));
        }
        if (c.outputBias()) {
            layer.add(bias("self_attn.o_proj.bias", h));
        }
        switch (c.qkNorm()) {
            case PER_HEAD -> {
                layer.add(norm("self_attn.q_norm", c.headDim()));
                layer.add(norm("self_attn.k_norm", c.headDim()));
            }
            case FULL_WIDTH -> {
                layer.add(norm("self_attn.q_norm", q));
                layer.add(norm("self_attn.k_norm", kv));
            }
            case NONE -> { }
        }
        if (sparse) {
            ModelConfig.Experts e = c.experts();
            long width = e.intermediateSize();
            layer.add(new Tensor("mlp.gate", Kind.ROUTER, h, e.count(), 1, false));
            layer.add(new Tensor("mlp.experts.gate_up_proj", Kind.EXPERTS, h, 2 * width, e.count()));
            layer.add(new Tensor("mlp.experts.down_proj", Kind.EXPERTS, width, h, e.count()));
            if (e.sharedIntermediateSize() > 0) {
                long shared = e.sharedIntermediateSize();
                layer.add(linear("mlp.shared_expert.gate_proj", h, shared));
                layer.add(linear("mlp.shared_expert.up_proj", h, shared));
                layer.add(linear("mlp.shared_expert.down_proj", shared, h));
                // a sigmoid gate on the shared expert's output: an nn.Linear, but a router in what it does
                layer.add(new Tensor("mlp.shared_expert_gate", Kind.ROUTER, h, 1, 1, true));
            }
        } else {
            long inter = c.intermediateSize();
            if (f.fusedGateUp()) {
                layer.add(linear("mlp.gate_up_proj", h, 2 * inter));
            } else {
                layer.add(linear("mlp.gate_proj", h, inter));
                layer.add(linear("mlp.up_proj", h, inter));
            }
            layer.add(linear("mlp.down_proj", inter, h));
            if (c.mlpBias()) {
                layer.add(bias("mlp.gate_proj.bias", inter));
                layer.add(bias("mlp.up_proj.bias", inter));
                layer.add(bias("mlp.down_proj.bias", h));
            }
        }
        for (String norm : f.layerNorms()) {
            layer.add(norm(norm, h));
        }
        return layer;
    }

    private static Tensor linear(String name, long in, long out) {
        return new Tensor(name, Kind.LINEAR, in, out, 1);
    }

    private static Tensor bias(String name, long length) {
        return new Tensor(name, Kind.BIAS, length, 1, 1);
    }

    private static Tensor norm(String name, long length) {
        return new Tensor(name, Kind.NORM, length, 1, 1);
    }
}
