package dev.finetune.adapters;

import ai.djl.ndarray.NDArray;
import java.util.List;

/**
 * One linear projection of the model, {@code y = x·Wᵀ (+ b)}, however its weight is stored and trained.
 *
 * <p>The model builds every linear layer through a {@link ProjectionFactory} and never asks which kind it got:
 * full fine-tuning, LoRA and QLoRA differ only here. Weights keep the Hugging Face layout {@code [out, in]}.
 */
public interface Projection {

    /** The Hugging Face name of the layer without the {@code .weight} suffix, e.g. {@code model.layers.0.self_attn.q_proj}. */
    String name();

    /** {@code x [..., in] → [..., out]}. Must be safe to differentiate (no Java {@code Number} operands). */
    NDArray forward(NDArray x);

    /** The arrays the optimizer updates, named as they are saved (HF names for full weights, PEFT names for adapters). */
    List<NamedArray> trainable();

    /**
     * This projection applied to the TorchScript variable {@code x}, a {@code [tokens, in]} matrix, as one
     * TorchScript expression giving {@code [tokens, out]}, for a decoder
     * layer run as one compiled module; {@code null} when there is none, and the layer then runs op by op. The
     * expression computes what {@link #forward} computes right now, with the same ops in the same order (random
     * draws included), so the two give the same numbers and gradients. It may change with the projection's state
     * (an adapter switched off), so a caller compiles each distinct source once and reuses it.
     */
    default String script(String x, ScriptArguments arguments) {
        return null;
    }

    /**
     * {@link #forward} for generation, computed as PEFT computes it where that order differs from the one training
     * uses; only adapters differ.
     */
    default NDArray infer(NDArray x) {
        return forward(x);
    }

    /** {@link #infer} as one TorchScript expression, as {@link #script} is {@link #forward}'s. */
    default String inferScript(String x, ScriptArguments arguments) {
        return script(x, arguments);
    }
}
