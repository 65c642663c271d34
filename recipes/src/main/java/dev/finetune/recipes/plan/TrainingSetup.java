package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ReferenceModel;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ModelConfig;

/**
 * Everything the memory model needs to know about a run, independent of how the recipe spelled it.
 *
 * @param modelName how the plan names the model (hub name or directory)
 * @param microBatch sequences per device per forward pass (for DPO: pairs; for GRPO: completions)
 * @param sequenceLength tokens per sequence (SFT and DPO); GRPO's prompt, beside its {@code maxCompletionLength}
 * @param objective the recipe's; a GRPO one with its generation batch resolved ({@code null}: micro × accumulation)
 * @param sharding {@link Sharding#SINGLE} uses one device whatever the hardware offers
 * @param reference what DPO and GRPO compare the policy with ({@link ReferenceModel#of})
 */
public record TrainingSetup(
        String modelName,
        ModelConfig model,
        AdapterSpec adapter,
        PrecisionRegime precision,
        Optimizer optimizer,
        int microBatch,
        int gradientAccumulation,
        int sequenceLength,
        boolean gradientCheckpointing,
        Recipe.Objective objective,
        Sharding sharding,
        Devices hardware,
        Kernels kernels,
        ReferenceModel reference) {

    public TrainingSetup {
        if (microBatch < 1 || gradientAccumulation < 1 || sequenceLength < 1) {
            throw new UserError("plan", "micro batch, accumulation and sequence length must be positive (got " + microBatch
                    + ", " + gradientAccumulation + ", " + sequenceLength + ")", "fix micro_batch_size / sequence_len");
        }
        if (hardware.onCpu() && sharding == Sharding.DDP) {
            // CPU ranks are the fsdp worker's, over gloo: they shard
            throw new UserError("plan", "CPU runs use one device or FSDP ranks, not " + sharding.label(),
                    "drop --cpu or the sharding");
        }
    }

    /** Data-parallel ranks: every device unless the run is single-device. */
    public int ranks() {
        return sharding == Sharding.SINGLE ? 1 : hardware.devices();
    }

    public long globalBatch() {
        return (long) microBatch * ranks() * gradientAccumulation;
    }

    public boolean onCpu() {
        return hardware.onCpu();
    }

    /** Tokens of one sequence the model is trained on. */
    public int trainedSequenceLength() {
        return objective instanceof Recipe.Objective.Grpo g ? sequenceLength + g.maxCompletionLength() : sequenceLength;
    }

    /** Sequences in one forward pass: DPO runs the chosen and the rejected answer of each pair. */
    public int sequencesPerMicroBatch() {
        return objective instanceof Recipe.Objective.Dpo ? 2 * microBatch : microBatch;
    }

    /** DPO, and GRPO with a KL term, evaluate a reference policy besides the trained one. */
    public boolean hasReference() {
        return reference.present();
    }

    /** GRPO: completions generated in one round; TRL's default is micro × accumulation. */
    public long generationBatch() {
        Integer given = objective instanceof Recipe.Objective.Grpo g ? g.generationBatchSize() : null;
        return given != null && given > 0 ? given : (long) microBatch * gradientAccumulation;
    }

    public String objectiveLabel() {
        return objective.match(sft -> "SFT", dpo -> "DPO", g -> "GRPO (" + g.numGenerations() + " generations, prompt ≤ "
                + sequenceLength + ", completion ≤ " + g.maxCompletionLength() + ")");
    }

    public TrainingSetup withMicroBatch(int micro, int accumulation) {
        return new TrainingSetup(modelName, model, adapter, precision, optimizer, micro, accumulation, sequenceLength,
                gradientCheckpointing, objective, sharding, hardware, kernels, reference);
    }

    public TrainingSetup withCheckpointing(boolean on) {
        return new TrainingSetup(modelName, model, adapter, precision, optimizer, microBatch, gradientAccumulation,
                sequenceLength, on, objective, sharding, hardware, kernels, reference);
    }

    public TrainingSetup withAdapter(AdapterSpec newAdapter) {
        return new TrainingSetup(modelName, model, newAdapter, precision, optimizer, microBatch, gradientAccumulation,
                sequenceLength, gradientCheckpointing, objective, sharding, hardware, kernels, reference);
    }

    public TrainingSetup withSharding(Sharding newSharding, Devices newHardware) {
        return new TrainingSetup(modelName, model, adapter, precision, optimizer, microBatch, gradientAccumulation,
                sequenceLength, gradientCheckpointing, objective, newSharding, newHardware, kernels, reference);
    }

    public TrainingSetup withSequenceLength(int length) {
        Recipe.Objective shorter = objective;
        int prompt = length;
        if (objective instanceof Recipe.Objective.Grpo g) {
            // Keep the prompt/completion split, scaled to the new total.
            prompt = Math.max(1, (int) ((long) sequenceLength * length / trainedSequenceLength()));
            shorter = g.sized(g.generationBatchSize(), Math.max(1, length - prompt));
        }
        return new TrainingSetup(modelName, model, adapter, precision, optimizer, microBatch, gradientAccumulation,
                prompt, gradientCheckpointing, shorter, sharding, hardware, kernels, reference);
    }
}
