package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import java.util.List;

/**
 * What the training loop needs from a model: its trainable arrays and a forward pass cut into layers.
 *
 * <p>The cut exists for activation checkpointing: {@link ForwardPass} keeps only each layer's input and
 * recomputes the layer during the backward walk, which it can only do if it can call layers one at a time.
 * Every method must be differentiable without Java {@code Number} operands (docs/engine-facts.md).
 *
 * @param <C> what every layer of one forward pass shares, built once from the inputs (for a transformer: rotary
 *     angles and the attention mask); kept alive for the recomputation
 */
public interface TrainableModel<C> {

    /** The arrays the optimizer updates, with the names they are checkpointed under; requires-gradient is set. */
    List<NamedArray> trainable();

    /**
     * Parameters outside the embedding table, frozen ones included: what the Hugging Face Trainer's
     * {@code total_flos} counts ({@code 6 × tokens × parameters}). By default the trainable ones only.
     */
    default long parameterCount() {
        return trainable().stream().mapToLong(p -> p.array().size()).sum();
    }

    /** Switches dropout on (training) or off (evaluation, generation, reference passes). */
    void setTraining(boolean training);

    /** The per-forward state the layers share; built outside the graph's trainable part. */
    C prepare(ModelInputs inputs);

    /** {@code inputIds [B, T] → hidden [B, T, D]}. */
    NDArray embed(ModelInputs inputs);

    /** The decoder layers in order. */
    List<? extends Layer<C>> layers();

    /** {@code hidden [B, T, D] → logits [B, T, V]}. */
    NDArray finalNormAndHead(NDArray hidden);

    /**
     * {@link TokenScores#sft} of {@link #finalNormAndHead}'s logits. A model whose head is one matrix overrides
     * this to apply the head inside the loss ({@link TokenScores#sftThroughHead}), where backward writes no
     * {@code [B, T, V]} gradient.
     */
    default TokenScores.Sft sftScores(NDArray hidden, long[] targets, float[] weights, NDManager manager) {
        return TokenScores.sft(finalNormAndHead(hidden), targets, weights, manager);
    }

    /** {@link TokenScores#perToken} of {@link #finalNormAndHead}'s logits; overridden as {@link #sftScores} is. */
    default TokenScores.PerToken perTokenScores(NDArray hidden, long[] targets, float[] weights, NDManager manager) {
        return TokenScores.perToken(finalNormAndHead(hidden), targets, weights, manager);
    }

    /** One decoder layer: {@code hidden [B, T, D] → hidden [B, T, D]}; a pure function of its arguments and weights. */
    @FunctionalInterface
    interface Layer<C> {
        NDArray forward(NDArray hidden, C context);
    }
}
