package dev.finetune.adapters;

import ai.djl.ndarray.NDArray;

/** Builds the model's linear layers; the one place that decides between full, LoRA and QLoRA training. */
@FunctionalInterface
public interface ProjectionFactory {

    /**
     * @param name the layer's Hugging Face name without {@code .weight}
     * @param weight {@code [out, in]}, float32, owned by the model's long-lived manager
     * @param bias {@code [out]} or {@code null}
     */
    Projection create(String name, NDArray weight, NDArray bias);
}
