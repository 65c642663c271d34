package dev.finetune.recipes.plan;

import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.ReferenceModel;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.model.KnownModels;
import dev.finetune.recipes.model.ModelConfig;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The FLOPs model and the time it gives, with the arithmetic written out from the architectures' numbers. */
class TimeModelTest {

    static final long GIB = 1L << 30;
    static final ModelConfig LLAMA_8B = KnownModels.lookup("meta-llama/Llama-3.1-8B").orElseThrow();
    static final ModelConfig LLAMA_70B = KnownModels.lookup("meta-llama/Llama-3.1-70B").orElseThrow();
    static final Accelerator H100 = Accelerator.lookup("H100").orElseThrow();

    @Test
    void h100IsTheSxmPartWith989DenseBf16Teraflops() {
        assertEquals("H100-SXM", H100.name());
        assertEquals(989, H100.halfTflops());
        assertEquals("A100-80GB", Accelerator.lookup("nvidia a100").orElseThrow().name());
        assertTrue(Accelerator.lookup("H100 PCIe").isPresent());
    }

    /**
     * Llama-3.1-8B, LoRA r=16 on all seven projections, 2 × 2048 tokens × 8 accumulation, one H100.
     * Matmul parameters: 32 layers × (q 4096·4096 + k, v 4096·1024 + o 4096·4096 + gate, up, down 4096·14336)
     * = 32 × 218,103,808 = 6,979,321,856, plus the head 4096 · 128,256 = 525,336,576: N = 7,504,658,432.
     * Attention: A = 2 · 32 layers · 4096 · 2048 = 536,870,912. Adapters: 2 · 16 · 32 · Σ(in + out) = 2 · 16 · 32 ·
     * (8192 + 5120 + 5120 + 8192 + 3 · 18432) = 83,886,080. LoRA: 4N + 3A + 3·adapters = 31,880,904,704 FLOPs/token.
     * H100 bf16 dense 989 TFLOPS × 40 % = 395.6 TFLOPS → 12,408.6 tokens/s; 1000 steps × 32,768 tokens = 2640.8 s;
     * at $2.50 per GPU-hour, $1.83.
     */
    @Test
    void oneH100TrainsAnEightBillionLoraAtTwelveThousandTokensPerSecond() {
        AdapterSpec.Lora lora = new AdapterSpec.Lora(16, 32, 0, List.of(), true, false, null);
        TrainingSetup s = new TrainingSetup("8b", LLAMA_8B, lora, PrecisionRegime.MIXED_FP32_MASTER, Optimizer.ADAMW_TORCH,
                2, 8, 2048, false, new Recipe.Objective.Sft(), Sharding.SINGLE, Devices.gpus(1, 1, 80 * GIB), Kernels.ours(), new ReferenceModel.None());
        long n = 32L * (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336) + 4096L * 128_256;
        assertEquals(7_504_658_432L, n);
        long attention = 2L * 32 * 4096 * 2048;
        long adapters = 2L * 16 * 32 * (8192 + 5120 + 5120 + 8192 + 3 * 18432);
        long perToken = 4 * n + 3 * attention + 3 * adapters;
        assertEquals(31_880_904_704L, perToken);
        TimeModel.Estimate e = TimeModel.estimate(s, ComputeDevice.gpu(H100, s.precision(), null, null), 1000L, 2.5);
        assertEquals(perToken, e.flops().perToken(), 1);
        double tokensPerSecond = 989e12 * 0.40 / perToken;
        assertEquals(tokensPerSecond, e.tokensPerSecondPerDevice(), 1e-6);
        assertEquals(12_408.6, e.tokensPerSecondPerDevice(), 0.1);
        assertEquals(32_768, e.tokensPerStep());
        assertEquals(1000 * 32_768 / tokensPerSecond, e.totalSeconds(), 1e-6);
        assertEquals(2640.8 / 3600 * 2.5, e.cost(), 0.001);
        String text = e.describe();
        assertTrue(text.contains("H100-SXM, 16-bit dense peak 989 TFLOPS × 40 % utilisation"), text);
        assertTrue(text.contains("44 min wall; $1.83 at $2.50 per GPU-hour × 1 GPU"), text);
    }

    /**
     * Llama-3.1-70B full fine-tune under FSDP on 8 H100s, checkpointing on, 1 × 2048 tokens × 4 accumulation per rank.
     * N = 80 × (8192² + 2 · 8192·1024 + 8192² + 3 · 8192·28672) + 8192 · 128,256 = 68,451,041,280 + 1,050,673,152
     * = 69,501,714,432. A = 2 · 80 · 8192 · 2048 = 2,684,354,560. Full: 6N + 3A, plus checkpointing's second forward
     * of the decoder layers 2 · 68,451,041,280 + A: 564,649,787,392 FLOPs/token. 395.6 TFLOPS per H100 → 700.6
     * tokens/s per GPU, 5605 on eight; a step of 8 × 4 × 2048 = 65,536 tokens takes 11.7 s.
     */
    @Test
    void eightH100sTrainSeventyBillionUnderFsdpAtSevenHundredTokensPerSecondEach() {
        TrainingSetup s = new TrainingSetup("70b", LLAMA_70B, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE, Optimizer.ADAMW_TORCH,
                1, 4, 2048, true, new Recipe.Objective.Sft(), Sharding.FSDP_FULL_SHARD, Devices.gpus(8, 1, 80 * GIB), Kernels.ours(), new ReferenceModel.None());
        long decoder = 80L * (8192L * 8192 + 2L * 8192 * 1024 + 8192L * 8192 + 3L * 8192 * 28672);
        long n = decoder + 8192L * 128_256;
        assertEquals(69_501_714_432L, n);
        long attention = 2L * 80 * 8192 * 2048;
        long perToken = 6 * n + 3 * attention + 2 * decoder + attention;
        assertEquals(564_649_787_392L, perToken);
        TimeModel.Estimate e = TimeModel.estimate(s, ComputeDevice.gpu(H100, s.precision(), null, null), 500L, 3.0);
        assertEquals(perToken, e.flops().perToken(), 1);
        assertEquals(989e12 * 0.4 / perToken, e.tokensPerSecondPerDevice(), 1e-9);
        assertEquals(700.6, e.tokensPerSecondPerDevice(), 0.1);
        assertEquals(65_536, e.tokensPerStep());
        assertEquals(65_536 / (8 * 989e12 * 0.4 / perToken), e.secondsPerStep(), 1e-9);
        // 500 steps × 11.70 s = 1.62 h on 8 GPUs at $3: $39.
        assertEquals(500 * e.secondsPerStep() / 3600 * 8 * 3.0, e.cost(), 1e-9);
        assertTrue(e.describe().contains("8 devices"), e.describe());
    }

    @Test
    void overridesReplaceThePeakAndTheUtilisationAndUnknownStepsGiveTheStepTime() {
        TrainingSetup s = new TrainingSetup("8b", LLAMA_8B, new AdapterSpec.Full(), PrecisionRegime.FP32, Optimizer.ADAMW_TORCH,
                1, 1, 1024, false, new Recipe.Objective.Sft(), Sharding.SINGLE, Devices.gpus(1, 1, 80 * GIB), Kernels.ours(), new ReferenceModel.None());
        ComputeDevice fp32 = ComputeDevice.gpu(H100, PrecisionRegime.FP32, null, null);
        assertEquals(67e12, fp32.peakFlops());
        ComputeDevice given = ComputeDevice.gpu(H100, PrecisionRegime.FP32, 400.0, 0.5);
        assertEquals(200e12, given.effectiveFlops());
        TimeModel.Estimate e = TimeModel.estimate(s, given, null, 2.0);
        assertEquals(null, e.cost());
        assertTrue(e.describe().contains("total steps unknown"), e.describe());
    }

    @Test
    void checkpointingDpoAndGrpoAddTheirForwards() {
        AdapterSpec.Lora lora = new AdapterSpec.Lora(8, 16, 0, List.of("q_proj", "v_proj"), false, false, null);
        TrainingSetup sft = new TrainingSetup("8b", LLAMA_8B, lora, PrecisionRegime.BF16_PURE, Optimizer.ADAMW_TORCH, 1, 1, 1024,
                false, new Recipe.Objective.Sft(), Sharding.SINGLE, Devices.gpus(1, 1, 80 * GIB), Kernels.ours(), new ReferenceModel.None());
        TimeModel.Flops base = TimeModel.flops(sft);
        TimeModel.Flops ckpt = TimeModel.flops(sft.withCheckpointing(true));
        assertTrue(ckpt.perToken() > base.perToken() && ckpt.perToken() < base.perToken() * 1.5);
        TrainingSetup dpo = new TrainingSetup("8b", LLAMA_8B, lora, PrecisionRegime.BF16_PURE, Optimizer.ADAMW_TORCH, 1, 1, 1024,
                false, RecipeSetupTest.dpo(), Sharding.SINGLE, Devices.gpus(1, 1, 80 * GIB), Kernels.ours(), ReferenceModel.of(RecipeSetupTest.dpo(), lora, null));
        assertEquals(base.perToken() * 1.5, TimeModel.flops(dpo).perToken(), base.perToken() * 0.01);
        TrainingSetup grpo = new TrainingSetup("8b", LLAMA_8B, lora, PrecisionRegime.BF16_PURE, Optimizer.ADAMW_TORCH, 8, 1, 256,
                false, RecipeSetupTest.grpo(8, 512, 0.0), Sharding.SINGLE, Devices.gpus(1, 1, 80 * GIB), Kernels.ours(), ReferenceModel.of(RecipeSetupTest.grpo(8, 512, 0.0), lora, null));
        TimeModel.Estimate e = TimeModel.estimate(grpo, ComputeDevice.gpu(H100, grpo.precision(), null, null), 10L, null);
        // Decoding 512 tokens reads the 16 GB of bf16 weights 512 times at 3.35 TB/s: 2.4 s, more than its FLOPs.
        assertEquals(512 * LLAMA_8B.parameters().total() * 2.0 / 3.35e12, e.generationSecondsPerStep(), 1e-9);
        assertTrue(e.describe().contains("GRPO generation"), e.describe());
    }
}
