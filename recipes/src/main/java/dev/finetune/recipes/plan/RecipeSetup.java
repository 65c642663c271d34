package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters;
import java.util.stream.Collectors;

/**
 * The one mapping from a validated {@link Recipe} and its {@link ResolvedRun} to the memory model's
 * {@link TrainingSetup}.
 */
public final class RecipeSetup {

    private RecipeSetup() {}

    /**
     * @param run the run's decisions: devices, backend, precision, sharding, reference, checkpointing
     * @param regime {@code null} for the run's own ({@link ResolvedRun#precision}); {@code plan --precision} gives one
     * @param micro / accumulation / generationBatch the resolved batch arithmetic (micro batch per rank, accumulation
     *     steps, GRPO completions per generation round or 0)
     */
    public static TrainingSetup of(Recipe recipe, ResolvedRun run, String modelName, ModelConfig model,
            PrecisionRegime regime, int micro, int accumulation, int generationBatch) {
        requireTargets(recipe.adapter(), model);
        Recipe.Training t = recipe.training();
        return new TrainingSetup(modelName, model, recipe.adapter(), regime != null ? regime : run.precision(),
                t.optimizer(), micro, accumulation,
                t.sequenceLen(), run.activationCheckpointing(), objective(recipe.objective(), generationBatch),
                run.sharding(recipe), run.devices(), run.backend() == ResolvedRun.Backend.SINGLE
                        ? Kernels.singleDevice(singleDeviceLoss(recipe, run.precision(), model))
                        : worker(recipe, run, model), run.reference());
    }

    /**
     * Families whose logits are transformed after the head (Gemma 2/3's final soft-capping, Granite's and Cohere's
     * scaling): the worker keeps their full logits (finetune_worker.head_loss.why_not reads the same from the config).
     */
    static final java.util.Set<String> LOGIT_TRANSFORMS = java.util.Set.of("gemma2", "gemma3", "gemma3_text",
            "granite", "granitemoe", "cohere", "cohere2");

    /**
     * What the torch worker computes with (finetune_worker.kernels, as the worker plan asks): the LM head inside the
     * loss over chunks of rows for every objective where the head is a plain matrix (no LoRA on it, no bias, no logit
     * transform), else the full logits; per-document causal attention (SDPA, no dense mask) unless the family slides
     * a window, which keeps the dense mask (every score computed; on the CPU transformers' eager attention keeps its
     * weights); decoder layers compiled under {@code torch_compile: true}, or {@code auto} on CUDA.
     */
    static Kernels worker(Recipe recipe, ResolvedRun run, ModelConfig model) {
        boolean plainHead = !model.outputBias() && !LOGIT_TRANSFORMS.contains(model.modelType())
                && model.parameters().loraTargets(recipe.adapter()).stream()
                        .noneMatch(t -> t.name().equals("lm_head") || t.name().endsWith(".lm_head"));
        boolean cuda = run.device() == ResolvedRun.Device.CUDA;
        boolean compiled = recipe.speedups().torchCompile() == Recipe.Flag.TRUE
                || (recipe.speedups().torchCompile() == Recipe.Flag.AUTO && cuda);
        Kernels.Attention attention = model.slidingWindow() == null ? Kernels.Attention.FUSED
                : cuda ? Kernels.Attention.FUSED_MASKED : Kernels.Attention.SCORES;
        return new Kernels(compiled ? Kernels.Layers.FUSED : Kernels.Layers.EAGER,
                plainHead ? Kernels.Loss.HEAD_INSIDE_CHUNKED : Kernels.Loss.FULL, attention);
    }

    /**
     * The single-device trainer applies the LM head inside its pass over the logits where it computes in float32
     * and the head is one matrix (no LoRA on {@code lm_head}): the SFT loss then a chunk of logits at a time, DPO's
     * and GRPO's log-probabilities all of them.
     */
    static Kernels.Loss singleDeviceLoss(Recipe recipe, PrecisionRegime regime, ModelConfig model) {
        boolean plainHead = regime != PrecisionRegime.CPU_BF16_AUTOCAST
                && model.parameters().loraTargets(recipe.adapter()).stream()
                        .noneMatch(t -> t.name().equals("lm_head") || t.name().endsWith(".lm_head"));
        if (!plainHead) {
            return Kernels.Loss.IN_PLACE;
        }
        return recipe.objective() instanceof Recipe.Objective.Sft ? Kernels.Loss.HEAD_INSIDE_CHUNKED
                : Kernels.Loss.HEAD_INSIDE;
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
