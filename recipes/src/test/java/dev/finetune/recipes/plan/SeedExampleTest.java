package dev.finetune.recipes.plan;

import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.ReferenceModel;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.model.KnownModels;
import dev.finetune.recipes.model.ModelConfig;
import org.junit.jupiter.api.Test;

/**
 * The seed example: a 7B Llama in BF16 with AdamW, bf16 weights and fp32 moments, needs 14 GB of weights,
 * 14 GB of gradients and 56 GB of optimizer state; one GPU cannot hold it, 8 GPUs with DDP still hold a full replica,
 * FSDP divides it.
 */
class SeedExampleTest {

    static final long GIB = 1L << 30;
    static final ModelConfig LLAMA_7B = KnownModels.lookup("meta-llama/Llama-2-7b-hf").orElseThrow();

    static TrainingSetup setup(int gpus, Sharding sharding, boolean checkpointing) {
        return new TrainingSetup("meta-llama/Llama-2-7b-hf", LLAMA_7B, new AdapterSpec.Full(), PrecisionRegime.BF16_FP32_MOMENTS,
                Optimizer.ADAMW_TORCH, 4, 1, 2048, checkpointing, new Recipe.Objective.Sft(), sharding,
                Devices.gpus(gpus, 1, 80 * GIB), Kernels.ours(), new ReferenceModel.None());
    }

    @Test
    void staticTermsAre14And14And56Gigabytes() {
        MemoryEstimate plain = MemoryModel.estimate(setup(1, Sharding.SINGLE, false));
        long params = LLAMA_7B.parameterCount();
        long weights = plain.term("weights").in(Phase.FORWARD_BACKWARD);
        long gradients = plain.term("gradients").in(Phase.FORWARD_BACKWARD);
        long optimizer = plain.term("optimizer_state").in(Phase.FORWARD_BACKWARD);
        assertEquals(2 * params, weights);
        assertEquals(2 * params, gradients);
        assertEquals(8 * params, optimizer);
        // "7B" is 6.74e9 parameters: 13.5 / 13.5 / 53.9 GB, the seed's 14 / 14 / 56 GB to within the rounding of "7B".
        assertEquals(14, weights / 1e9, 0.6);
        assertEquals(14, gradients / 1e9, 0.6);
        assertEquals(56, optimizer / 1e9, 2.5);
        System.out.println(PlanText.render(MemoryPlan.of(setup(1, Sharding.SINGLE, false))));
    }

    @Test
    void oneGpuPlainExceedsDdpWhichExceedsFsdpUnder25GiB() {
        MemoryEstimate single = MemoryModel.estimate(setup(1, Sharding.SINGLE, false));
        MemoryEstimate ddp = MemoryModel.estimate(setup(8, Sharding.DDP, true));
        MemoryEstimate fsdp = MemoryModel.estimate(setup(8, Sharding.FSDP_FULL_SHARD, true));
        System.out.printf("seed: 1 GPU plain %.1f GiB, 8 GPUs DDP + checkpointing %.1f GiB, 8 GPUs FSDP + checkpointing %.1f GiB%n",
                single.peakBytes() / (double) GIB, ddp.peakBytes() / (double) GIB, fsdp.peakBytes() / (double) GIB);
        System.out.println(PlanText.render(MemoryPlan.of(setup(8, Sharding.FSDP_FULL_SHARD, true))));
        assertTrue(single.peakBytes() > ddp.peakBytes(), "1 GPU plain > 8 GPUs DDP + checkpointing");
        assertTrue(ddp.peakBytes() > fsdp.peakBytes(), "DDP > FSDP");
        assertTrue(fsdp.peakBytes() < 25 * GIB, "FSDP under 25 GiB per device");
        assertFalse(single.fits());
        assertTrue(fsdp.fits());
        assertEquals(8 * 4, fsdp.setup().globalBatch());
    }

    @Test
    void theOneGpuPlanProposesRemediesThatFit() {
        MemoryPlan plan = MemoryPlan.of(setup(1, Sharding.SINGLE, false));
        assertFalse(plan.estimate().fits());
        assertFalse(plan.remedies().isEmpty());
        for (Remedy r : plan.remedies()) {
            assertTrue(r.result().fits(), r.change());
        }
        // Weights, gradients and moments alone take 75 of the 80 GiB: a smaller micro batch alone cannot fix it.
        assertTrue(plan.remedies().stream().noneMatch(r -> r.change().startsWith("micro_batch_size") && !r.change().contains("+")));
        assertTrue(plan.remedies().stream().anyMatch(r -> r.change().startsWith("FSDP full shard over")),
                PlanText.render(plan));
    }
}
