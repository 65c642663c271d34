package dev.finetune.recipes;

/**
 * What DPO, and GRPO with a KL term, compare the policy with: decided once per run ({@link ResolvedRun}) as TRL
 * decides it, and read by the plan (its memory term and the batch line), both trainers and the worker plan.
 */
public sealed interface ReferenceModel {

    /** SFT, and GRPO with {@code beta: 0}: nothing to compare with. */
    record None() implements ReferenceModel {}

    /** A new LoRA adapter: the base model with the adapter switched off, so no second copy of any weight. */
    record AdapterDisabled() implements ReferenceModel {}

    /**
     * An adapter continued from {@code lora_model_dir}: TRL's frozen "ref" copy of it as it starts, so policy and
     * reference start equal; it costs an adapter's worth of memory.
     */
    record FrozenAdapter(String loraModelDir) implements ReferenceModel {}

    /**
     * A full fine-tune (DPO only: validation refuses GRPO's KL term without an adapter): the starting weights, whose
     * log-probabilities are taken once before the first step.
     */
    record StartingWeights() implements ReferenceModel {}

    /** The one rule, as TRL applies it. */
    static ReferenceModel of(Recipe.Objective objective, AdapterSpec adapter, String loraModelDir) {
        boolean compares = objective instanceof Recipe.Objective.Dpo
                || (objective instanceof Recipe.Objective.Grpo g && g.beta() != 0);
        if (!compares) {
            return new None();
        }
        if (!(adapter instanceof AdapterSpec.Lora)) {
            return new StartingWeights();
        }
        return loraModelDir != null ? new FrozenAdapter(loraModelDir) : new AdapterDisabled();
    }

    static ReferenceModel of(Recipe recipe) {
        return of(recipe.objective(), recipe.adapter(), recipe.output().loraModelDir());
    }

    /** Whether a reference pass runs at all. */
    default boolean present() {
        return !(this instanceof None);
    }

    /** The batch line's words for it, or {@code null} when there is none. */
    default String describe() {
        if (this instanceof AdapterDisabled) {
            return "the base model (the new adapter switched off): no second copy of the weights";
        }
        if (this instanceof FrozenAdapter) {
            return "a frozen copy of the adapter in lora_model_dir (TRL's \"ref\" adapter): policy and reference "
                    + "start equal";
        }
        if (this instanceof StartingWeights) {
            return "the starting weights (their log-probabilities, computed once before training)";
        }
        return null;
    }
}
