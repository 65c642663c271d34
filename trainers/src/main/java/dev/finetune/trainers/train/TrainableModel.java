package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import dev.finetune.adapters.NamedArray;
import java.util.List;

/**
 * What the training loop needs from a model: its trainable arrays and a forward pass cut into layers.
 *
 * <p>The cut exists for activation checkpointing: {@link ForwardPass} keeps only each layer's input and
 * recomputes the layer during the backward walk, which it can only do if it can call layers one at a time.
 * Every method must be differentiable without Java {@code Number} operands (DESIGN.md §5).
 */
public interface TrainableModel {

    /** The arrays the optimizer updates, with the names they are checkpointed under; requires-gradient is set. */
    List<NamedArray> trainable();

    /** Switches dropout on (training) or off (evaluation, generation, reference passes). */
    void setTraining(boolean training);

    /** {@code inputIds [B, T] → hidden [B, T, D]}. */
    NDArray embed(ModelInputs inputs);

    /** The decoder layers in order. */
    List<? extends Layer> layers();

    /** {@code hidden [B, T, D] → logits [B, T, V]}. */
    NDArray finalNormAndHead(NDArray hidden);

    /** The whole forward pass, {@code inputIds [B, T] → logits [B, T, V]}. */
    default NDArray forward(ModelInputs inputs) {
        NDArray hidden = embed(inputs);
        for (Layer layer : layers()) {
            hidden = layer.forward(hidden, inputs);
        }
        return finalNormAndHead(hidden);
    }

    /** One decoder layer: {@code hidden [B, T, D] → hidden [B, T, D]}; a pure function of its arguments and weights. */
    @FunctionalInterface
    interface Layer {
        NDArray forward(NDArray hidden, ModelInputs inputs);
    }
}
