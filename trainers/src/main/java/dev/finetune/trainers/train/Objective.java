package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import java.util.Map;

/**
 * Turns a micro batch into a loss and metrics, and nothing else: SFT, DPO and GRPO differ only here, so the loop
 * never knows which one it runs.
 *
 * @param <B> the batch type the objective reads
 */
public interface Objective<B extends Batch> {

    /**
     * Runs the model through {@code forward} (never directly: the loop decides whether layers are recomputed) and
     * returns the loss <em>summed</em> over the batch's {@link Batch#lossWeight()} units. Arrays must be created in
     * {@code manager} and without Java {@code Number} operands; they are closed when the micro step ends.
     */
    Loss loss(B batch, ForwardPass forward, NDManager manager);

    /**
     * @param sum 0-dim float32, differentiable, summed over the batch's loss units
     * @param metrics named scalars, each a mean over this batch's loss units, merged into {@code metrics.jsonl}
     *     under these names (averaged over the accumulation window, weighted by loss units)
     * @param units what {@code sum} is summed over when only the batch's run knows it (GRPO's {@code dapo}
     *     divides by the completion tokens of the whole window, sampled inside the objective), else {@code null};
     *     the loop then rescales the window's gradients once every micro batch has run
     */
    record Loss(NDArray sum, Map<String, Double> metrics, Double units) {
        public Loss {
            metrics = Map.copyOf(metrics);
        }

        /** Summed over the batch's {@link Batch#lossWeight()} units, as known before the batch ran. */
        public Loss(NDArray sum, Map<String, Double> metrics) {
            this(sum, metrics, null);
        }
    }
}
