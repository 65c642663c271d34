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

    DecoderLayer(int index, int heads, int kvHeads, int headDim, RmsNorm inputNorm, RmsNorm postAttentionNorm, RmsNorm queryNorm,
            RmsNorm keyNorm, Projection[] attention, Projection[] mlp, Scalars scalars) {
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
    }

    public int index() {
        return index;
    }

    /**
     * {@code hidden [B, T, C]} → {@code [B, T, C]}. {@code mask} is additive, {@code [B or 1, 1, T, T]}, as made by
     * {@link LlamaModel#attentionMask}.
     */
    public NDArray forward(NDArray hidden, RotaryEmbedding.Angles angles, NDArray mask) {
        return forward(hidden, angles, mask, null);
    }

    /** With a cache, keys and values are appended to it and {@code mask} spans every filled slot: {@code [B, 1, T, filled]}. */
    NDArray forward(NDArray hidden, RotaryEmbedding.Angles angles, NDArray mask, KvCache cache) {
        NDArray attended = attention(inputNorm.forward(hidden), angles, mask, cache);
        NDArray residual = hidden.add(attended);
        return residual.add(mlp(postAttentionNorm.forward(residual)));
    }

    private NDArray attention(NDArray x, RotaryEmbedding.Angles angles, NDArray mask, KvCache cache) {
        long batch = x.getShape().get(0);
        long time = x.getShape().get(1);
        NDArray q = heads(query.forward(x), batch, time, heads, queryNorm);
        NDArray k = heads(key.forward(x), batch, time, kvHeads, keyNorm);
        NDArray v = value.forward(x).reshape(batch, time, kvHeads, headDim).transpose(0, 2, 1, 3);
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
        return output.forward(merged);
    }

    private NDArray heads(NDArray projected, long batch, long time, int count, RmsNorm perHeadNorm) {
        NDArray split = projected.reshape(batch, time, count, headDim);
        if (perHeadNorm != null) {
            split = perHeadNorm.forward(split);
        }
        return split.transpose(0, 2, 1, 3);
    }

    private NDArray mlp(NDArray x) {
        NDArray g = gate.forward(x);
        // SiLU composed as g·sigmoid(g): DJL's swish takes a Java Number and corrupts gradients (DESIGN.md §5).
        NDArray activated = g.mul(g.getNDArrayInternal().sigmoid());
        return down.forward(activated.mul(up.forward(x)));
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
