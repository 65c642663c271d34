package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ModelConfig;

/**
 * Everything the memory model needs to know about a run, independent of how the recipe spelled it.
 *
 * @param modelName how the plan names the model (hub name or directory)
 * @param microBatch sequences per device per forward pass (for DPO: pairs; for GRPO: completions)
 * @param sequenceLength tokens per sequence (SFT and DPO; GRPO uses its prompt and completion lengths)
 * @param sharding {@link Sharding#SINGLE} uses one device whatever the hardware offers
 */
public record TrainingSetup(
        String modelName,
        ModelConfig model,
        AdapterSpec adapter,
        PrecisionRegime precision,
        Recipe.Optimizer optimizer,
        int microBatch,
        int gradientAccumulation,
        int sequenceLength,
        boolean gradientCheckpointing,
        Objective objective,
        Sharding sharding,
        Hardware hardware,
        Kernels kernels) {

    public TrainingSetup {
        if (microBatch < 1 || gradientAccumulation < 1 || sequenceLength < 1) {
            throw new UserError("plan", "micro batch, accumulation and sequence length must be positive (got " + microBatch
                    + ", " + gradientAccumulation + ", " + sequenceLength + ")", "fix micro_batch_size / sequence_len");
        }
        if (hardware instanceof Hardware.Cpu && sharding != Sharding.SINGLE) {
            throw new UserError("plan", "CPU runs use one device, not " + sharding.label(), "drop --cpu or the sharding");
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
        return hardware instanceof Hardware.Cpu;
    }

    /** Tokens of one sequence the model is trained on. */
    public int trainedSequenceLength() {
        return objective instanceof Objective.Grpo g ? g.maxPromptLength() + g.maxCompletionLength() : sequenceLength;
    }

    /** Sequences in one forward pass: DPO runs the chosen and the rejected answer of each pair. */
    public int sequencesPerMicroBatch() {
        return objective instanceof Objective.Dpo ? 2 * microBatch : microBatch;
    }

    public TrainingSetup withMicroBatch(int micro, int accumulation) {
        return new TrainingSetup(modelName, model, adapter, precision, optimizer, micro, accumulation, sequenceLength,
                gradientCheckpointing, objective, sharding, hardware, kernels);
    }

    public TrainingSetup withCheckpointing(boolean on) {
        return new TrainingSetup(modelName, model, adapter, precision, optimizer, microBatch, gradientAccumulation,
                sequenceLength, on, objective, sharding, hardware, kernels);
    }

    public TrainingSetup withAdapter(AdapterSpec newAdapter) {
        return new TrainingSetup(modelName, model, newAdapter, precision, optimizer, microBatch, gradientAccumulation,
                sequenceLength, gradientCheckpointing, objective, sharding, hardware, kernels);
    }

    public TrainingSetup withSharding(Sharding newSharding, Hardware newHardware) {
        return new TrainingSetup(modelName, model, adapter, precision, optimizer, microBatch, gradientAccumulation,
                sequenceLength, gradientCheckpointing, objective, newSharding, newHardware, kernels);
    }

    public TrainingSetup withSequenceLength(int length) {
        Objective shorter = objective;
        if (objective instanceof Objective.Grpo g) {
            // Keep the prompt/completion split, scaled to the new total.
            int prompt = Math.max(1, (int) ((long) g.maxPromptLength() * length / trainedSequenceLength()));
            shorter = new Objective.Grpo(g.numGenerations(), prompt, Math.max(1, length - prompt), g.beta(), g.generationBatch());
        }
        return new TrainingSetup(modelName, model, adapter, precision, optimizer, microBatch, gradientAccumulation,
                length, gradientCheckpointing, shorter, sharding, hardware, kernels);
    }
}
