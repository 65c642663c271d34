package dev.finetune.trainers.train.grpo;

import dev.finetune.trainers.data.GrpoPrompt;
import dev.finetune.trainers.train.Batch;
import java.util.List;

/**
 * A micro batch of prompts; the objective samples {@code numGenerations} completions of each, so a prompt's group
 * never straddles two micro batches and its advantages are normalised within the batch.
 */
public record GrpoBatch(List<GrpoPrompt> prompts, int numGenerations) implements Batch {

    public GrpoBatch {
        prompts = List.copyOf(prompts);
        if (prompts.isEmpty() || numGenerations < 2) {
            throw new IllegalArgumentException("a GRPO batch needs prompts and at least 2 generations each");
        }
    }

    /**
     * Prompt tokens as the model reads them (each prompt once per generation); the completions are not known
     * before the rollout, so tokens per second counts only what is known up front.
     */
    @Override
    public long tokenCount() {
        return (long) numGenerations * prompts.stream().mapToLong(p -> p.ids().length).sum();
    }

    @Override
    public long samples() {
        return lossWeight();
    }

    /** The loss is a sum over completions, so the loop averages over every completion of the window. */
    @Override
    public long lossWeight() {
        return (long) prompts.size() * numGenerations;
    }
}
