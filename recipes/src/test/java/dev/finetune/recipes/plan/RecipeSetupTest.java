package dev.finetune.recipes.plan;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.DataSelection;
import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.RewardSpec;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.KnownModels;
import dev.finetune.recipes.model.ModelConfig;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class RecipeSetupTest {

    static final ModelConfig LLAMA_8B = KnownModels.lookup("meta-llama/Llama-3.1-8B").orElseThrow();
    static final LaunchShape ONE_24 = LaunchShape.gpus(1, 1, 24L << 30);
    static final LaunchShape EIGHT_80 = LaunchShape.gpus(8, 1, 80L << 30);

    /** What plan does: the recipe resolved for {@code shape}, then its memory model's input. */
    static TrainingSetup setup(Recipe r, ModelConfig model, LaunchShape shape, PrecisionRegime regime, int micro,
            int accumulation, int generationBatch) {
        return RecipeSetup.of(r, ResolvedRun.of(r, shape), "llama", model, regime, micro, accumulation, generationBatch);
    }

    /** A GRPO objective with TRL's other defaults; the plan reads only these three numbers of it. */
    static Recipe.Objective.Grpo grpo(int generations, int maxCompletionLength, double beta) {
        return new Recipe.Objective.Grpo(generations, null, maxCompletionLength, 1.0, beta, 0.2,
                List.of(new RewardSpec.ExactMatch("exact_match", "answer", false)), List.of(1.0),
                dev.finetune.recipes.ScaleRewards.GROUP, false, dev.finetune.recipes.GrpoLossType.DAPO, 0.2, null,
                Recipe.Objective.Sampling.NONE, false, true);
    }

    static Recipe.Objective.Dpo dpo() {
        return new Recipe.Objective.Dpo(0.1, 0, false, dev.finetune.recipes.DpoLossType.SIGMOID);
    }

    static Recipe recipe(AdapterSpec adapter, Recipe.Flag bf16, Optimizer optimizer, boolean checkpointing,
            Recipe.Objective objective, Recipe.Fsdp fsdp, Recipe.Hardware hardware) {
        return recipe(adapter, bf16, optimizer, checkpointing, objective, fsdp, hardware, Recipe.Speedups.NONE);
    }

    static Recipe recipe(AdapterSpec adapter, Recipe.Flag bf16, Optimizer optimizer, boolean checkpointing,
            Recipe.Objective objective, Recipe.Fsdp fsdp, Recipe.Hardware hardware, Recipe.Speedups speedups) {
        return new Recipe(
                new Recipe.Model("meta-llama/Llama-3.1-8B", null, null, false, Map.of(), null, null, List.of(), Map.of(), null, null, Map.of()),
                adapter,
                new Recipe.Data(List.of(), List.of(), 0, null, false, Recipe.ExcessLength.DROP, false, DataSelection.DEFAULTS),
                new Recipe.Training(2048, true, true, 2048, true, 1, null, 2e-4, dev.finetune.recipes.LrScheduler.COSINE, 0, 0, false, null, null, 
                        // null: the optimizer a recipe gets when it names none (the key table's default)
                        optimizer != null ? optimizer : Optimizer.ADAMW_TORCH_FUSED, 0, 0.9, 0.999,
                        1e-8, 1.0, checkpointing, 42, true, null, 3),
                new Recipe.Batch(2, 4, null, null),
                new Recipe.Precision(bf16, Recipe.Flag.FALSE, Recipe.Flag.AUTO),
                objective,
                new Recipe.Distributed(fsdp, 1, 1, 1800),
                hardware,
                Recipe.Backend.AUTO,
                new Recipe.Output("out", new dev.finetune.recipes.Resume.Fresh(), null, dev.finetune.recipes.SaveStrategy.STEPS, null, null, 4, dev.finetune.recipes.EvalStrategy.NO, null, null, null, null, false, false),
                speedups);
    }

    static final AdapterSpec QLORA = new AdapterSpec.Lora(16, 32, 0.05, List.of(), true, false, new AdapterSpec.Nf4(64, true));

    @Test
    void qloraOnOneGpuIsMixedPrecisionOnOneDevice() {
        Recipe r = recipe(QLORA, Recipe.Flag.TRUE, Optimizer.PAGED_ADAMW_8BIT, true, new Recipe.Objective.Sft(), null,
                new Recipe.Hardware.Gpus(1, 1, 24L << 30));
        TrainingSetup s = setup(r, LLAMA_8B, LaunchShape.RECIPE, null, 2, 4, 0);
        assertEquals(PrecisionRegime.MIXED_FP32_MASTER, s.precision());
        assertEquals(Optimizer.PAGED_ADAMW_8BIT, s.optimizer());
        assertEquals(Sharding.SINGLE, s.sharding());
        assertEquals(Devices.gpus(1, 1, 24L << 30), s.hardware());
        assertEquals(8, s.globalBatch());
        assertTrue(s.gradientCheckpointing());
        assertTrue(MemoryModel.estimate(s).fits(), PlanText.render(MemoryPlan.of(s)));
    }

    /**
     * The plan follows the torch worker's path (#22): on one GPU the LM head inside the loss in chunks, for DPO's
     * log-probabilities too, per-document attention without a dense mask, layers compiled under torch_compile; full
     * logits where the head is LoRA-adapted. Qwen2.5-0.5B (vocabulary 151,936) at 2 × 2048 positions: 441 rows
     * (64 Mi logits / 151,936) of fp32 logits beside their bf16 product or gradient factor (6 B each), 402 MB,
     * instead of 4,096 rows.
     */
    @Test
    void theWorkersPlanHasItsChunkedHeadAndDocumentAttention() {
        ModelConfig qwen = KnownModels.lookup("Qwen/Qwen2.5-0.5B").orElseThrow();
        AdapterSpec lora = new AdapterSpec.Lora(16, 32, 0, List.of(), true, false, null);
        for (Recipe.Objective objective : List.of(new Recipe.Objective.Sft(), dpo())) {
            Recipe r = recipe(lora, Recipe.Flag.TRUE, Optimizer.ADAMW_TORCH_FUSED, false, objective, null,
                    new Recipe.Hardware.Gpus(1, 1, 80L << 30));
            TrainingSetup s = setup(r, qwen, LaunchShape.RECIPE, null, 2, 4, 0);
            assertEquals(ResolvedRun.Backend.FSDP, ResolvedRun.of(r, LaunchShape.RECIPE).backend());
            assertEquals(new Kernels(Kernels.Layers.EAGER, Kernels.Loss.HEAD_INSIDE_CHUNKED, Kernels.Attention.FUSED),
                    s.kernels(), objective.toString());
            MemoryPlan plan = MemoryPlan.of(s);
            assertTrue(PlanText.render(plan).contains("441 positions × 151936 vocab × 6.00 B (the LM head inside the "
                    + "loss, one chunk of logits at a time)"), PlanText.render(plan));
        }
        // GRPO's trained pass also takes each position's entropy: the chunk's fp32 probabilities beside its logits
        Recipe grpo = recipe(lora, Recipe.Flag.TRUE, Optimizer.ADAMW_TORCH_FUSED, false, grpo(8, 256, 0.04), null,
                new Recipe.Hardware.Gpus(1, 1, 80L << 30));
        String grpoPlan = PlanText.render(MemoryPlan.of(setup(grpo, qwen, LaunchShape.RECIPE, null, 8, 1, 8)));
        assertTrue(grpoPlan.contains("× 151936 vocab × 8.00 B (the LM head inside the loss, one chunk of logits at a "
                + "time, with the fp32 probabilities for the entropy)"), grpoPlan);
        Recipe compiled = recipe(lora, Recipe.Flag.TRUE, null, false, new Recipe.Objective.Sft(), null,
                new Recipe.Hardware.Gpus(1, 1, 80L << 30), new Recipe.Speedups(Recipe.Flag.AUTO, null, null,
                List.of(), false));
        assertEquals(Kernels.Layers.FUSED, setup(compiled, qwen, LaunchShape.RECIPE, null, 2, 4, 0).kernels().layers(),
                "torch_compile: auto compiles on CUDA");
        AdapterSpec onHead = new AdapterSpec.Lora(16, 32, 0, List.of("q_proj", "lm_head"), false, false, null);
        Recipe adaptedHead = recipe(onHead, Recipe.Flag.TRUE, null, false, new Recipe.Objective.Sft(), null,
                new Recipe.Hardware.Gpus(1, 1, 80L << 30));
        // (Llama 3.1 8B: an lm_head of its own; Qwen2.5-0.5B ties it to the embedding)
        assertEquals(Kernels.Loss.FULL, setup(adaptedHead, LLAMA_8B, LaunchShape.RECIPE, null, 2, 4, 0).kernels()
                .loss());
    }

    @Test
    void fsdpConfigShardsAndOffloadMovesStateToTheHost() {
        Recipe.Fsdp fsdp = new Recipe.Fsdp(2, false, true, true, true, "SHARDED_STATE_DICT", "TRANSFORMER_BASED_WRAP", "LlamaDecoderLayer");
        Recipe full = recipe(new AdapterSpec.Full(), Recipe.Flag.TRUE, Optimizer.ADAMW_TORCH_FUSED, false,
                new Recipe.Objective.Sft(), fsdp, new Recipe.Hardware.Unspecified());
        TrainingSetup s = setup(full, LLAMA_8B, EIGHT_80, null, 2, 4, 0);
        assertEquals(Sharding.FSDP_FULL_SHARD, s.sharding());
        assertEquals(PrecisionRegime.BF16_PURE, s.precision(), "a full bf16 fine-tune keeps AdamW state in bf16");
        assertTrue(s.gradientCheckpointing(), "fsdp_config.activation_checkpointing turns checkpointing on");
        assertEquals(64, s.globalBatch());
        Recipe.Fsdp offload = new Recipe.Fsdp(2, true, true, false, true, null, null, null);
        Recipe offloaded = recipe(new AdapterSpec.Full(), Recipe.Flag.TRUE, Optimizer.ADAMW_TORCH, false,
                new Recipe.Objective.Sft(), offload, new Recipe.Hardware.Unspecified());
        assertEquals(Sharding.FSDP_OFFLOAD, setup(offloaded, LLAMA_8B, EIGHT_80, null, 2, 4, 0).sharding());
        Recipe noFsdp = recipe(new AdapterSpec.Full(), Recipe.Flag.TRUE, null, false, new Recipe.Objective.Sft(), null,
                new Recipe.Hardware.Unspecified());
        // eight GPUs without fsdp_config run on the fsdp backend (backend: auto), and the worker always shards
        assertEquals(Sharding.FSDP_FULL_SHARD, setup(noFsdp, LLAMA_8B, EIGHT_80, null, 2, 4, 0).sharding());
    }

    @Test
    void cpuIsFp32UnlessBf16IsTrueAndRegimeCanBeChosen() {
        Recipe r = recipe(QLORA, Recipe.Flag.AUTO, Optimizer.ADAMW_TORCH, false, new Recipe.Objective.Sft(), null,
                new Recipe.Hardware.Cpu());
        LaunchShape cpu = LaunchShape.RECIPE;
        assertTrue(setup(r, LLAMA_8B, cpu, null, 1, 1, 0).onCpu());
        assertEquals(PrecisionRegime.FP32, setup(r, LLAMA_8B, cpu, null, 1, 1, 0).precision());
        Recipe bf16 = recipe(QLORA, Recipe.Flag.TRUE, Optimizer.ADAMW_TORCH, false, new Recipe.Objective.Sft(), null,
                new Recipe.Hardware.Cpu());
        PrecisionRegime autocast = setup(bf16, LLAMA_8B, cpu, null, 1, 1, 0).precision();
        assertEquals(PrecisionRegime.CPU_BF16_AUTOCAST, autocast,
                "bf16: true on CPU: bf16 matmuls over fp32 weights, gradients and optimizer state");
        assertEquals(PrecisionRegime.FP32.frozenWeight() + 2, autocast.frozenWeight(), "each weight's bf16 copy counts");
        assertEquals(PrecisionRegime.FP32.moment(), autocast.moment());
        assertEquals(PrecisionRegime.BF16_PURE, setup(r, LLAMA_8B, ONE_24, PrecisionRegime.BF16_PURE, 1, 1, 0).precision());
        // bf16: auto means bf16 on a GPU.
        assertEquals(PrecisionRegime.MIXED_FP32_MASTER, setup(r, LLAMA_8B, ONE_24, null, 1, 1, 0).precision());
    }

    @Test
    void grpoAndDpoCarryTheirShapes() {
        Recipe.Objective.Grpo grpo = grpo(8, 1024, 0.04);
        Recipe r = recipe(QLORA, Recipe.Flag.TRUE, null, true, grpo, null, new Recipe.Hardware.Unspecified());
        TrainingSetup s = setup(r, LLAMA_8B, ONE_24, null, 2, 4, 8);
        assertEquals(grpo.sized(8, 1024), s.objective(), "the generation batch resolved from the batch plan");
        assertEquals(8, s.generationBatch());
        assertEquals(2048 + 1024, s.trainedSequenceLength(), "prompts at sequence_len, completions at their limit");
        assertEquals("GRPO (8 generations, prompt ≤ 2048, completion ≤ 1024)", s.objectiveLabel());
        assertTrue(MemoryModel.estimate(s).term("kv_cache").in(Phase.GENERATION) > 0);
        Recipe dpo = recipe(QLORA, Recipe.Flag.TRUE, null, true, dpo(), null, new Recipe.Hardware.Unspecified());
        TrainingSetup d = setup(dpo, LLAMA_8B, ONE_24, null, 2, 4, 0);
        assertEquals(dpo(), d.objective());
        assertEquals(4, d.sequencesPerMicroBatch(), "a chosen and a rejected sequence per pair");
    }

    @Test
    void loraTargetsThatMatchNothingAreAnError() {
        ModelConfig phi3 = KnownModels.lookup("microsoft/Phi-3-mini-4k-instruct").orElseThrow();
        AdapterSpec qv = new AdapterSpec.Lora(8, 16, 0, List.of("q_proj", "v_proj"), false, false, null);
        Recipe r = recipe(qv, Recipe.Flag.TRUE, null, true, new Recipe.Objective.Sft(), null, new Recipe.Hardware.Unspecified());
        UserError e = assertThrows(UserError.class, () -> setup(r, phi3, ONE_24, null, 1, 1, 0));
        assertTrue(e.oneLine().contains("qkv_proj"), e.oneLine());
    }

    @Test
    void gpusWithoutMemoryAskForIt() {
        Recipe r = recipe(new AdapterSpec.Full(), Recipe.Flag.TRUE, null, false, new Recipe.Objective.Sft(), null,
                new Recipe.Hardware.Gpus(8, 1, null));
        UserError e = assertThrows(UserError.class, () -> ResolvedRun.of(r, LaunchShape.RECIPE).devices());
        assertTrue(e.oneLine().contains("--gpu-memory"), e.oneLine());
    }
}
