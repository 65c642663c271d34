package dev.finetune.trainers.model;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.Scalars;
import java.util.ArrayList;
import java.util.List;

/**
 * One pre-norm decoder block: grouped-query self-attention with rotary positions, then a SwiGLU MLP, each added
 * to the residual stream. Safe to differentiate and to recompute (activation checkpointing): it holds no state
 * besides its weights.
 */
public final class DecoderLayer {
    private final int index;
    private final int heads;
    private final int kvHeads;
    private final int headDim;
    private final RmsNorm inputNorm;
    private final RmsNorm postAttentionNorm;
    private final RmsNorm queryNorm;
    private final RmsNorm keyNorm;
    private final Projection query;
    private final Projection key;
    private final Projection value;
    private final Projection output;
    private final Projection gate;
    private final Projection up;
    private final Projection down;
    private final NDArray attentionScale;
    private final LayerScripts scripts;

    DecoderLayer(int index, int heads, int kvHeads, int headDim, RmsNorm inputNorm, RmsNorm postAttentionNorm, RmsNorm queryNorm,
            RmsNorm keyNorm, Projection[] attention, Projection[] mlp, Scalars scalars, LayerScripts scripts) {
        this.index = index;
        this.heads = heads;
        this.kvHeads = kvHeads;
        this.headDim = headDim;
        this.inputNorm = inputNorm;
        this.postAttentionNorm = postAttentionNorm;
        this.queryNorm = queryNorm;
        this.keyNorm = keyNorm;
        this.query = attention[0];
        this.key = attention[1];
        this.value = attention[2];
        this.output = attention[3];
        this.gate = mlp[0];
        this.up = mlp[1];
        this.down = mlp[2];
        this.attentionScale = scalars.of((float) (1.0 / Math.sqrt(headDim)));
        this.scripts = scripts;
    }

    public int index() {
        return index;
    }

    /**
     * {@code hidden [B, T, C]} → {@code [B, T, C]}. {@code mask} is additive, {@code [B or 1, 1, T, T]}, as made by
     * {@link LlamaModel#attentionMask}.
     */
    public NDArray forward(NDArray hidden, RotaryEmbedding.Angles angles, NDArray mask) {
        return forward(hidden, angles, mask, null, false, false);
    }

    /**
     * As {@link #forward(NDArray, RotaryEmbedding.Angles, NDArray)}; {@code causal} says {@code mask} is the plain
     * causal mask, which lets the compiled layer's attention skip the blocks above the diagonal instead of adding
     * the mask to every score (half the attention work; the skipped weights are exactly 0 either way).
     */
    public NDArray forward(NDArray hidden, RotaryEmbedding.Angles angles, NDArray mask, boolean causal) {
        return forward(hidden, angles, mask, null, false, causal);
    }

    /**
     * The same layer for generation, its norms computed as Hugging Face computes them ({@link RmsNorm#infer}), so
     * a checkpoint's logits are PEFT's to float rounding. With a cache, keys and values are appended to it and
     * {@code mask} spans every filled slot: {@code [B, 1, T, filled]}.
     */
    public NDArray infer(NDArray hidden, RotaryEmbedding.Angles angles, NDArray mask, KvCache cache) {
        return forward(hidden, angles, mask, cache, true, false);
    }

    private NDArray forward(NDArray hidden, RotaryEmbedding.Angles angles, NDArray mask, KvCache cache, boolean inference,
            boolean causal) {
        if (scripts.enabled()) {
            // generation (a KV cache, or PEFT's order of rounding) keeps float32 throughout
            LayerScripts.Arguments arguments = new LayerScripts.Arguments(hidden.getManager(),
                    scripts.bfloat16() && !inference && cache == null);
            String source = script(arguments, hidden, angles, mask, cache, inference, causal);
            if (source != null) {
                return scripts.run(source, arguments);
            }
        }
        NDArray attended = attention(norm(inputNorm, hidden, inference), angles, mask, cache, inference);
        NDArray residual = hidden.add(attended);
        return residual.add(mlp(norm(postAttentionNorm, residual, inference), inference));
    }

    private static NDArray norm(RmsNorm norm, NDArray x, boolean inference) {
        return inference ? norm.infer(x) : norm.forward(x);
    }

    private static String norm(RmsNorm norm, String x, LayerScripts.Arguments arguments, boolean inference) {
        return inference ? norm.inferScript(x, arguments) : norm.script(x, arguments);
    }

    private NDArray attention(NDArray x, RotaryEmbedding.Angles angles, NDArray mask, KvCache cache, boolean inference) {
        long batch = x.getShape().get(0);
        long time = x.getShape().get(1);
        NDArray q = heads(project(query, x, inference), batch, time, heads, queryNorm, inference);
        NDArray k = heads(project(key, x, inference), batch, time, kvHeads, keyNorm, inference);
        NDArray v = project(value, x, inference).reshape(batch, time, kvHeads, headDim).transpose(0, 2, 1, 3);
        q = RotaryEmbedding.apply(q, angles).mul(attentionScale);
        k = RotaryEmbedding.apply(k, angles);
        if (cache != null) {
            NDArray[] past = cache.append(index, k, v);
            k = past[0];
            v = past[1];
        }
        // Query heads sharing a key/value head are grouped on their own axis, so K and V are broadcast, never copied.
        int groups = heads / kvHeads;
        NDArray grouped = q.reshape(new Shape(batch, kvHeads, groups, time, headDim));
        NDArray scores = grouped.matMul(k.expandDims(2).swapAxes(-1, -2)).add(mask.expandDims(2));
        NDArray mixed = scores.softmax(-1).matMul(v.expandDims(2));
        NDArray merged = mixed.reshape(batch, heads, time, headDim).transpose(0, 2, 1, 3).reshape(batch, time, (long) heads * headDim);
        return project(output, merged, inference);
    }

    private static NDArray project(Projection projection, NDArray x, boolean inference) {
        return inference ? projection.infer(x) : projection.forward(x);
    }

    private NDArray heads(NDArray projected, long batch, long time, int count, RmsNorm perHeadNorm, boolean inference) {
        NDArray split = projected.reshape(batch, time, count, headDim);
        if (perHeadNorm != null) {
            split = norm(perHeadNorm, split, inference);
        }
        return split.transpose(0, 2, 1, 3);
    }

    private NDArray mlp(NDArray x, boolean inference) {
        NDArray g = project(gate, x, inference);
        // SiLU composed as g·sigmoid(g): DJL's swish takes a Java Number and corrupts gradients (docs/engine-facts.md).
        NDArray activated = g.mul(g.getNDArrayInternal().sigmoid());
        return project(down, activated.mul(project(up, x, inference)), inference);
    }

    /**
     * This layer's forward pass as the source of one TorchScript module, collecting the tensors it reads into
     * {@code arguments}; {@code null} when a projection has no script form. It saves the JNI call, the Java
     * wrapper and the native handle of every op (about 60 per layer), and uses two kernels DJL has no binding for:
     * torch's fused {@code scaled_dot_product_attention} (no {@code [B, H, T, T]} scores kept for backward) and
     * {@code silu}. Everything else is the op-by-op path's ops in its order, random draws included, so the two
     * agree to float rounding (attention sums in another order: about 1e-6). With a KV cache (generation) the
     * module stores the new keys and values into the cache's buffers in place and attends over every filled slot,
     * so generation runs the same kernels as training and as transformers. Under bfloat16 compute
     * ({@link LlamaModel#setBfloat16Compute}) the projections and attention read bfloat16 copies made inside the
     * module, and what they return meets the float32 residual stream again.
     */
    private String script(LayerScripts.Arguments arguments, NDArray hidden, RotaryEmbedding.Angles angles, NDArray mask,
            KvCache cache, boolean inference, boolean causal) {
        arguments.named("hidden", hidden);
        arguments.named("cos", angles.cos());
        arguments.named("sin", angles.sin());
        arguments.named("mask", mask);
        if (cache != null) {
            NDArray[] buffers = cache.buffers(index, hidden.getShape().get(1), mask.getShape().get(3));
            arguments.named("cache_k", buffers[0]);
            arguments.named("cache_v", buffers[1]);
        }
        boolean bf16 = arguments.bfloat16();
        String[] projected = new String[7];
        Projection[] order = {query, key, value, output, gate, up, down};
        String[] inputs = bf16
                ? new String[] {"xb", "xb", "xb", "merged", "x2b", "x2b", "gated"}
                : new String[] {"x", "x", "x", "merged", "x2", "x2", "gated"};
        for (int i = 0; i < order.length; i++) {
            projected[i] = inference ? order[i].inferScript(inputs[i], arguments) : order[i].script(inputs[i], arguments);
            if (projected[i] == null) {
                return null;
            }
        }
        if (bf16) {
            // bfloat16 mixed precision, as torch's CPU autocast runs a Llama: matrix multiplies and attention in
            // bfloat16; the residual stream, norms and rotary in float32 (q and k come back to float32 for them)
            projected[0] = LayerScripts.Arguments.toFloat32(projected[0]);
            projected[1] = LayerScripts.Arguments.toFloat32(projected[1]);
        }
        int groups = heads / kvHeads;
        StringBuilder body = new StringBuilder();
        line(body, "b = hidden.size(0)");
        line(body, "t = hidden.size(1)");
        // one row per token: each projection is one 2-D GEMM, which an adapter can accumulate into in place
        line(body, "rows = torch.flatten(hidden, 0, 1)");
        line(body, "x = " + norm(inputNorm, "rows", arguments, inference));
        if (bf16) {
            line(body, "xb = " + LayerScripts.Arguments.toBfloat16("x"));
        }
        line(body, "q = torch.reshape(" + projected[0] + ", [b, t, " + heads + ", " + headDim + "])");
        if (queryNorm != null) {
            line(body, "q = " + norm(queryNorm, "q", arguments, inference));
        }
        line(body, "q = torch.permute(q, [0, 2, 1, 3])");
        line(body, "k = torch.reshape(" + projected[1] + ", [b, t, " + kvHeads + ", " + headDim + "])");
        if (keyNorm != null) {
            line(body, "k = " + norm(keyNorm, "k", arguments, inference));
        }
        line(body, "k = torch.permute(k, [0, 2, 1, 3])");
        line(body, "v = torch.permute(torch.reshape(" + projected[2] + ", [b, t, " + kvHeads + ", " + headDim
                + "]), [0, 2, 1, 3])");
        line(body, "hq = torch.chunk(q, 2, 3)");
        line(body, "q = torch.add(torch.mul(q, cos), torch.mul(torch.cat([torch.neg(hq[1]), hq[0]], 3), sin))");
        line(body, "hk = torch.chunk(k, 2, 3)");
        line(body, "k = torch.add(torch.mul(k, cos), torch.mul(torch.cat([torch.neg(hk[1]), hk[0]], 3), sin))");
        if (bf16) {
            line(body, "q = " + LayerScripts.Arguments.toBfloat16("q"));
            line(body, "k = " + LayerScripts.Arguments.toBfloat16("k"));
        }
        if (cache != null) {
            // The new slots end where the mask ends (it spans every filled slot); attention reads all of them.
            line(body, "end = mask.size(3)");
            line(body, "cache_k.narrow(2, end - t, t).copy_(k)");
            line(body, "cache_v.narrow(2, end - t, t).copy_(v)");
            line(body, "k = cache_k.narrow(2, 0, end)");
            line(body, "v = cache_v.narrow(2, 0, end)");
        }
        if (groups > 1) {
            // query head h reads key/value head h / groups, as the grouped reshape of the op-by-op path does
            line(body, "k = torch.repeat_interleave(k, " + groups + ", 1)");
            line(body, "v = torch.repeat_interleave(v, " + groups + ", 1)");
        }
        String additiveMask = bf16 ? LayerScripts.Arguments.toBfloat16("mask") : "mask";
        line(body, "mixed = torch.scaled_dot_product_attention(q, k, v, " + (causal ? "None, 0., True" : additiveMask + ", 0., False")
                + ", scale=" + 1.0 / Math.sqrt(headDim) + ")");
        line(body, "merged = torch.reshape(torch.permute(mixed, [0, 2, 1, 3]), [b * t, " + (long) heads * headDim + "])");
        line(body, "residual = torch.add(rows, " + projected[3] + ")");
        line(body, "x2 = " + norm(postAttentionNorm, "residual", arguments, inference));
        if (bf16) {
            line(body, "x2b = " + LayerScripts.Arguments.toBfloat16("x2"));
        }
        line(body, "g = " + projected[4]);
        line(body, "gated = torch.mul(torch.silu(g), " + projected[5] + ")");
        line(body, "return torch.reshape(torch.add(residual, " + projected[6] + "), [b, t, -1])");
        return arguments.module(body);
    }

    private static void line(StringBuilder body, String statement) {
        body.append("    ").append(statement).append('\n');
    }

    /** Arrays the optimizer updates: norms when they are trained, plus whatever each projection trains. */
    List<NamedArray> trainable(boolean normsTrained) {
        List<NamedArray> params = new ArrayList<>();
        if (normsTrained) {
            params.add(inputNorm.weight());
            if (queryNorm != null) {
                params.add(queryNorm.weight());
                params.add(keyNorm.weight());
            }
        }
        for (Projection p : List.of(query, key, value, output)) {
            params.addAll(p.trainable());
        }
        if (normsTrained) {
            params.add(postAttentionNorm.weight());
        }
        for (Projection p : List.of(gate, up, down)) {
            params.addAll(p.trainable());
        }
        return params;
    }
}
