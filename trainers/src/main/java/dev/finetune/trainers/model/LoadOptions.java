package dev.finetune.trainers.model;

import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.ProjectionFactory;

/**
 * How a checkpoint becomes a model.
 *
 * @param projections builds every linear layer (frozen, full fine-tune, LoRA, QLoRA)
 * @param trainEmbeddingsAndNorms embeddings and norm weights get gradients: only full fine-tuning trains them
 * @param mapWeights frozen weights read the file's pages directly instead of being copied: instant loading and
 *     shared page cache, but such arrays must never be written in place (the engine segfaults), so only for
 *     inference
 */
public record LoadOptions(ProjectionFactory projections, boolean trainEmbeddingsAndNorms, boolean mapWeights) {

    /** Generation and evaluation: nothing trains, weights are mapped. */
    public static LoadOptions inference() {
        return new LoadOptions(PlainProjection.frozenFactory(), false, true);
    }

    /** Every weight trains. */
    public static LoadOptions fullFineTune() {
        return new LoadOptions(PlainProjection.fullFineTuneFactory(), true, false);
    }

    /** Base weights frozen and owned (adapter code may quantize or merge them); the factory adds what trains. */
    public static LoadOptions adapters(ProjectionFactory factory) {
        return new LoadOptions(factory, false, false);
    }
}
