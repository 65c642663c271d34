package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters;
import java.util.stream.Collectors;

/**
 * The one mapping from a validated {@link Recipe} to the memory model's {@link TrainingSetup}: which precision regime,
 * optimizer, sharding and objective a recipe means on the given hardware.
 */
public final class RecipeSetup {

    private RecipeSetup() {}

    /**
     * @param hardware from the command line, or {@link Devices#of(Recipe.Hardware)} of the recipe
     * @param regime {@code null} to use what our trainers run for this recipe ({@link #regime})
     * @param micro / accumulation / generationBatch the resolved batch arithmetic (micro batch per rank, accumulation
     *     steps, GRPO completions per generation round or 0)
     */
    public static TrainingSetup of(Recipe recipe, String modelName, ModelConfig model, Devices hardware,
            PrecisionRegime regime, int micro, int accumulation, int generationBatch) {
        requireTargets(recipe.adapter(), model);
        Recipe.Training t = recipe.training();
        boolean checkpointing = t.gradientCheckpointing()
                || (recipe.distributed().fsdp() != null && recipe.distributed().fsdp().activationCheckpointing());
        return new TrainingSetup(modelName, model, recipe.adapter(),
                regime != null ? regime : regime(recipe, hardware), t.optimizer() != null ? t.optimizer() : Recipe.Optimizer.ADAMW_TORCH, micro, accumulation,
                t.sequenceLen(), checkpointing, objective(recipe.objective(), generationBatch),
                sharding(recipe, hardware), hardware,
                runsInThisJvm(recipe, hardware) ? Kernels.singleDevice(singleDeviceLoss(recipe, model)) : Kernels.ours());
    }

    /**
     * The single-device trainer applies the LM head inside its pass over the logits where it computes in float32
     * and the head is one matrix (no LoRA on {@code lm_head}): the SFT loss then a chunk of logits at a time, DPO's
     * and GRPO's log-probabilities all of them.
     */
    static Kernels.Loss singleDeviceLoss(Recipe recipe, ModelConfig model) {
        boolean plainHead = !recipe.precision().bfloat16OnCpu()
                && model.parameters().loraTargets(recipe.adapter()).stream()
                        .noneMatch(t -> t.name().equals("lm_head") || t.name().endsWith(".lm_head"));
        if (!plainHead) {
            return Kernels.Loss.IN_PLACE;
        }
        return recipe.objective() instanceof Recipe.Objective.Sft ? Kernels.Loss.HEAD_INSIDE_CHUNKED
                : Kernels.Loss.HEAD_INSIDE;
    }

    /** Runs on the single-device DJL trainer rather than the torchrun worker (DESIGN.md §5 and §6). */
    static boolean runsInThisJvm(Recipe recipe, Devices hardware) {
        return recipe.backend() == Recipe.Backend.SINGLE || (recipe.backend() == Recipe.Backend.AUTO
                && !recipe.distributed().sharded() && hardware.devices() <= 1);
    }

    /** A LoRA whose targets name no linear of this architecture would train nothing (Phi-3 has no {@code q_proj}). */
    static void requireTargets(AdapterSpec adapter, ModelConfig model) {
        if (adapter instanceof AdapterSpec.Lora && model.parameters().loraTargets(adapter).isEmpty()) {
            String linears = model.parameters().layer().stream()
                    .filter(t -> t.kind() == ModelParameters.Kind.LINEAR || t.kind() == ModelParameters.Kind.EXPERTS)
                    .map(ModelParameters.Tensor::shortName).distinct().collect(Collectors.joining(", "));
            throw new UserError("lora_target_modules", "matches no linear layer of this " + model.modelType() + " model",
                    "its linears are " + linears + "; or set lora_target_linear: true");
        }
    }

    /**
     * What a recipe costs per parameter, read the way Axolotl runs it: fp32 throughout on CPU (our CPU trainer,
     * DESIGN.md §5), with bf16 copies of the weights for the matmuls under {@code bf16: true}; on GPU with bf16/fp16 the model is loaded in 16 bits, so a full fine-tune keeps gradients and
     * torch AdamW's moments in 16 bits too (pure bf16, 8 B/param, as HF Trainer and torchtune do), while LoRA adapters
     * are kept in fp32 by PEFT (16 B per adapter parameter, the mixed-precision row). {@code --precision} overrides.
     */
    public static PrecisionRegime regime(Recipe recipe, Devices hardware) {
        if (hardware.onCpu()) {
            return recipe.precision().bfloat16OnCpu() ? PrecisionRegime.CPU_BF16_AUTOCAST : PrecisionRegime.FP32;
        }
        if (!recipe.precision().sixteenBit(true)) {
            return PrecisionRegime.FP32;
        }
        return recipe.adapter() instanceof AdapterSpec.Lora ? PrecisionRegime.MIXED_FP32_MASTER : PrecisionRegime.BF16_PURE;
    }

    /** {@code fsdp_config} shards (with offload when asked); several devices without it replicate (DDP). */
    public static Sharding sharding(Recipe recipe, Devices hardware) {
        if (recipe.backend() == Recipe.Backend.SINGLE || hardware.devices() == 1) {
            return Sharding.SINGLE;
        }
        Recipe.Fsdp fsdp = recipe.distributed().fsdp();
        if (fsdp != null || recipe.backend() == Recipe.Backend.FSDP) {
            return fsdp != null && fsdp.offloadParams() ? Sharding.FSDP_OFFLOAD : Sharding.FSDP_FULL_SHARD;
        }
        return Sharding.DDP;
    }

    /**
     * The recipe's objective, a GRPO one with the batch plan's generation batch when the recipe leaves it to TRL's
     * default. The plan sizes GRPO prompts at {@code sequence_len} and completions at
     * {@code trl.max_completion_length}: both at their limits, which is where the memory peak is.
     */
    static Recipe.Objective objective(Recipe.Objective objective, int generationBatch) {
        if (objective instanceof Recipe.Objective.Grpo g && g.generationBatchSize() == null) {
            return g.sized(generationBatch, g.maxCompletionLength());
        }
        return objective;
    }
}
