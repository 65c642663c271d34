package dev.finetune.recipes.plan;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ReferenceModel;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.KnownModels;
import dev.finetune.recipes.model.ModelConfig;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class MemoryModelTest {

    static final long GIB = 1L << 30;
    static final ModelConfig LLAMA_3B = KnownModels.lookup("meta-llama/Llama-3.2-3B").orElseThrow();
    static final ModelConfig LLAMA_8B = KnownModels.lookup("meta-llama/Llama-3.1-8B").orElseThrow();
    static final ModelConfig LLAMA2_7B = KnownModels.lookup("meta-llama/Llama-2-7b-hf").orElseThrow();
    static final AdapterSpec.Lora LORA = new AdapterSpec.Lora(16, 32, 0, List.of(), true, false, null);
    static final AdapterSpec.Lora QLORA = new AdapterSpec.Lora(16, 32, 0, List.of(), true, false, new AdapterSpec.Nf4(64, true));

    static TrainingSetup setup(ModelConfig model, AdapterSpec adapter, PrecisionRegime regime, Recipe.Objective objective,
            Sharding sharding, int gpus) {
        return new TrainingSetup("test", model, adapter, regime, Optimizer.ADAMW_TORCH, 2, 4, 2048, true, objective, sharding,
                Devices.gpus(gpus, 1, 80 * GIB), Kernels.ours(), ReferenceModel.of(objective, adapter, null));
    }

    static long staticBytes(MemoryEstimate e) {
        return List.of("weights", "gradients", "optimizer_state").stream()
                .map(e::term).filter(t -> t != null).mapToLong(t -> t.in(Phase.OPTIMIZER_STEP)).sum();
    }

    /** ZeRO paper accounting (the ZeRO paper's own examples): (2 + 2 + 12) bytes per parameter, ÷ N when sharded. */
    @Test
    void mixedPrecisionStateIsSixteenBytesPerParameterAsInZero() {
        long p = LLAMA2_7B.parameterCount();
        MemoryEstimate ddp = MemoryModel.estimate(setup(LLAMA2_7B, new AdapterSpec.Full(), PrecisionRegime.MIXED_FP32_MASTER,
                new Recipe.Objective.Sft(), Sharding.DDP, 8));
        assertEquals(16 * p, staticBytes(ddp));
        MemoryEstimate sharded = MemoryModel.estimate(setup(LLAMA2_7B, new AdapterSpec.Full(), PrecisionRegime.MIXED_FP32_MASTER,
                new Recipe.Objective.Sft(), Sharding.FSDP_FULL_SHARD, 8));
        assertEquals(16 * p / 8.0, staticBytes(sharded), 4);
        MemoryEstimate pure = MemoryModel.estimate(setup(LLAMA2_7B, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE,
                new Recipe.Objective.Sft(), Sharding.SINGLE, 1));
        assertEquals(8 * p, staticBytes(pure));
        MemoryEstimate fp32 = MemoryModel.estimate(setup(LLAMA2_7B, new AdapterSpec.Full(), PrecisionRegime.FP32,
                new Recipe.Objective.Sft(), Sharding.SINGLE, 1));
        assertEquals(16 * p, staticBytes(fp32));
    }

    /**
     * #21: the worker's save gathers nothing (each rank writes its DCP shards and its rows of the Hugging Face files,
     * finetune_worker/hf_layout.py, copying at most {@link MemoryModel#SAVE_CHUNK_BYTES} at a time to the host): on
     * GPUs the save phase adds nothing to the device; on CPU ranks DCP's copy of one shard. The JVM trainer still
     * stages its largest tensor in fp32.
     */
    @Test
    void theWorkersSaveAddsNoGatheredTensorToTheDevice() {
        ModelConfig llama70b = KnownModels.lookup("meta-llama/Llama-3.1-70B").orElseThrow();
        MemoryEstimate gpus = MemoryModel.estimate(setup(llama70b, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE,
                new Recipe.Objective.Sft(), Sharding.FSDP_FULL_SHARD, 8));
        assertEquals(0, gpus.term("save_staging").in(Phase.SAVE));
        assertEquals(0, gpus.term("fsdp_buffers").in(Phase.SAVE));
        assertTrue(gpus.total(Phase.SAVE) < gpus.total(Phase.OPTIMIZER_STEP), "a save is never the peak");
        TrainingSetup cpuRanks = new TrainingSetup("test", LLAMA_3B, new AdapterSpec.Full(), PrecisionRegime.FP32,
                Optimizer.ADAMW_TORCH, 1, 1, 256, true, new Recipe.Objective.Sft(), Sharding.FSDP_FULL_SHARD,
                Devices.cpuRanks(2, 1, 64 * GIB), Kernels.ours(), ReferenceModel.of(new Recipe.Objective.Sft(), new AdapterSpec.Full(), null));
        long largest = LLAMA_3B.parameters().largestTensor();
        assertEquals((largest + 1) / 2 * 4, MemoryModel.estimate(cpuRanks).term("save_staging").in(Phase.SAVE));
    }

    /** docs/memory-plan.md (LoRA and QLoRA): NF4 is 4.5 bits without, 4.127 bits with double quantization; embedding/head stay 16-bit. */
    @Test
    void qloraQuantizesOnlyDecoderLinears() {
        MemoryEstimate dq = MemoryModel.estimate(setup(LLAMA_8B, QLORA, PrecisionRegime.BF16_PURE, new Recipe.Objective.Sft(), Sharding.SINGLE, 1));
        long quantized = LLAMA_8B.parameters().quantizable();
        assertEquals(6_979_321_856L, quantized);
        assertEquals(2 * (LLAMA_8B.parameterCount() - quantized), dq.term("weights").in(Phase.LOAD));
        assertEquals(4.127 / 8, MemoryModel.nf4BytesPerParam(new AdapterSpec.Nf4(64, true)), 0.0005);
        assertEquals(4.5 / 8, MemoryModel.nf4BytesPerParam(new AdapterSpec.Nf4(64, false)), 1e-12);
        assertEquals(3.35, dq.term("weights_nf4").in(Phase.LOAD) / (double) GIB, 0.01);
        // Double quantization saves 0.373 bit per quantized parameter.
        AdapterSpec.Lora plainNf4 = new AdapterSpec.Lora(16, 32, 0, List.of(), true, false, new AdapterSpec.Nf4(64, false));
        MemoryEstimate nodq = MemoryModel.estimate(setup(LLAMA_8B, plainNf4, PrecisionRegime.BF16_PURE, new Recipe.Objective.Sft(), Sharding.SINGLE, 1));
        double saved = nodq.term("weights_nf4").in(Phase.LOAD) - dq.term("weights_nf4").in(Phase.LOAD);
        assertEquals(0.373, saved * 8 / quantized, 0.001);
    }

    /** The per-token, per-layer counts derived in docs/memory-plan.md (activations) (plus the fp32 log-sum-exp per head). */
    @Test
    void activationCountsMatchTheAnchors() {
        AdapterSpec full = new AdapterSpec.Full();
        int lse3b = 4 * LLAMA_3B.numAttentionHeads();
        assertEquals(137_216 + lse3b, LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.EAGER, 2, full, false));
        assertEquals(90_112 + lse3b, LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.FUSED, 2, full, false));
        assertEquals(208_896 + 4 * 32, LayerActivations.bytesPerToken(LLAMA_8B, Kernels.Layers.EAGER, 2, full, false));
        // fp32 activations (our CPU trainer): every saved tensor doubles except the norms' fp32 inputs, which already were.
        long fp32 = LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.EAGER, 4, full, false);
        assertTrue(fp32 > 137_216 && fp32 < 2 * 137_216, "fp32: " + fp32);
    }

    /**
     * A frozen projection keeps no input and a frozen norm no normalized copy: LoRA on q and v of Llama-3.2-3B (eager,
     * bf16) keeps the norms' fp32 inputs 2 × 4h, SDPA's q, k, v and output 2·(2hq + 2h_kv), the SwiGLU's gate,
     * silu(gate) and up 2 · 3I, the log-sum-exp 4 · heads, x·A per adapter 2r, and the q/v input once, 2h.
     */
    @Test
    void loraKeepsOnlyTheInputsOfAdaptedProjections() {
        AdapterSpec.Lora qv = new AdapterSpec.Lora(16, 32, 0, List.of("q_proj", "v_proj"), false, false, null);
        long h = 3072, hq = 3072, hkv = 1024, inter = 8192, heads = 24;
        long common = 2 * 4 * h + 2 * (2 * hq + 2 * hkv) + 2 * 3 * inter + 4 * heads;
        assertEquals(common + 2 * 2 * 16 + 2 * h,
                LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.EAGER, 2, qv, false));
        // PEFT's fp32 adapters under autocast: each adapter casts its own copy of the input.
        assertEquals(common + 2 * 2 * 16 + 2 * 2 * h,
                LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.EAGER, 2, qv, true));
        // Dropout: a dropped copy and a 1-byte mask per adapter instead of the shared input.
        AdapterSpec.Lora dropped = new AdapterSpec.Lora(16, 32, 0.05, List.of("q_proj", "v_proj"), false, false, null);
        assertEquals(common + 2 * 2 * 16 + 2 * 3 * h,
                LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.EAGER, 2, dropped, false));
        // Adapters on the MLP keep the MLP input and the down_proj input; all seven keep what a full fine-tune keeps
        // except the norms' 16-bit outputs.
        AdapterSpec.Lora mlp = new AdapterSpec.Lora(16, 32, 0, List.of("gate_proj", "up_proj", "down_proj"), false, false, null);
        assertEquals(common + 3 * 2 * 16 + 2 * h + 2 * inter,
                LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.EAGER, 2, mlp, false));
        AdapterSpec.Lora all = new AdapterSpec.Lora(16, 32, 0, List.of(), true, false, null);
        long full = LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.EAGER, 2, new AdapterSpec.Full(), false);
        assertEquals(full - 2 * 2 * h + 7 * 2 * 16,
                LayerActivations.bytesPerToken(LLAMA_3B, Kernels.Layers.EAGER, 2, all, false));
    }

    @Test
    void thePlanNamesTheModulesTheTargetsMatched() {
        AdapterSpec.Lora qv = new AdapterSpec.Lora(16, 32, 0, List.of("q_proj", "self_attn.v_proj", "lm_head"), false, false, null);
        String text = PlanText.render(MemoryPlan.of(setup(LLAMA_8B, qv, PrecisionRegime.BF16_PURE, new Recipe.Objective.Sft(), Sharding.SINGLE, 1)));
        assertTrue(text.contains("LoRA r=16 on q_proj, v_proj, lm_head (2 per layer + lm_head)"), text);
    }

    @Test
    void checkpointingKeepsOnlyLayerInputsPlusOneLayer() {
        TrainingSetup on = setup(LLAMA_8B, LORA, PrecisionRegime.BF16_PURE, new Recipe.Objective.Sft(), Sharding.SINGLE, 1);
        long tokens = 2L * 2048;
        long perLayer = LayerActivations.bytesPerToken(LLAMA_8B, Kernels.Layers.EAGER, 2, LORA, false);
        long finalNorm = 6L * 4096;
        assertEquals(tokens * (32L * 2 * 4096 + perLayer + finalNorm),
                MemoryModel.estimate(on).term("activations").in(Phase.FORWARD_BACKWARD));
        assertEquals(tokens * (32L * perLayer + finalNorm),
                MemoryModel.estimate(on.withCheckpointing(false)).term("activations").in(Phase.FORWARD_BACKWARD));
    }

    @Test
    void dpoDoublesTheSequencesAndNeedsAReferenceOnlyForFullFineTuning() {
        MemoryEstimate sft = MemoryModel.estimate(setup(LLAMA_8B, LORA, PrecisionRegime.BF16_PURE, new Recipe.Objective.Sft(), Sharding.SINGLE, 1));
        MemoryEstimate dpo = MemoryModel.estimate(setup(LLAMA_8B, LORA, PrecisionRegime.BF16_PURE, RecipeSetupTest.dpo(), Sharding.SINGLE, 1));
        assertEquals(2 * sft.term("logits").in(Phase.FORWARD_BACKWARD), dpo.term("logits").in(Phase.FORWARD_BACKWARD), 1);
        assertEquals(0, dpo.term("reference").max());
        assertTrue(dpo.term("reference").how().contains("adapter disabled"));
        MemoryEstimate fullDpo = MemoryModel.estimate(setup(LLAMA_8B, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE,
                RecipeSetupTest.dpo(), Sharding.FSDP_FULL_SHARD, 8));
        assertEquals(LLAMA_8B.parameterCount() * 2 / 8.0, fullDpo.term("reference").in(Phase.LOAD), 1);
        assertEquals(null, sft.term("reference"));
    }

    /**
     * A compiled chunked loss keeps only the 16-bit chunks (the fp32 work is recomputed inside the fused backward),
     * an eager one each chunk's fp32 log-softmax; both add the work of one chunk of eight.
     */
    @Test
    void aChunkedLossKeepsLessWhenCompiled() {
        assertEquals(2 + 2 / 8.0, new Kernels(Kernels.Layers.FUSED, Kernels.Loss.CHUNKED).bytesPerLogit(2), 1e-12);
        assertEquals(4 + (4 + 2) / 8.0, new Kernels(Kernels.Layers.EAGER, Kernels.Loss.CHUNKED).bytesPerLogit(2), 1e-12);
        assertEquals(2 + 4 + 2, new Kernels(Kernels.Layers.FUSED, Kernels.Loss.FULL).bytesPerLogit(2), 1e-12);
        TrainingSetup compiled = new TrainingSetup("test", LLAMA_8B, QLORA, PrecisionRegime.BF16_PURE, Optimizer.ADAMW_TORCH, 2, 1,
                2048, true, new Recipe.Objective.Sft(), Sharding.SINGLE, Devices.gpus(1, 1, 24 * GIB),
                new Kernels(Kernels.Layers.FUSED, Kernels.Loss.CHUNKED), new ReferenceModel.None());
        assertEquals(Math.round(4096L * 128256 * 2.25), MemoryModel.estimate(compiled).term("logits").in(Phase.FORWARD_BACKWARD));
    }

    @Test
    void grpoAddsAGenerationPhaseWithAKvCache() {
        // Prompts of 512 tokens (the setup's sequence length), completions of up to 1024.
        TrainingSetup grpo = new TrainingSetup("test", LLAMA_8B, LORA, PrecisionRegime.BF16_PURE, Optimizer.ADAMW_TORCH, 2, 4, 512,
                true, RecipeSetupTest.grpo(8, 1024, 0.04), Sharding.SINGLE, Devices.gpus(1, 1, 80 * GIB), Kernels.ours(), ReferenceModel.of(RecipeSetupTest.grpo(8, 1024, 0.04), LORA, null));
        MemoryEstimate e = MemoryModel.estimate(grpo);
        assertTrue(e.phases().contains(Phase.GENERATION));
        long sequences = 2L * 4;
        long cache = sequences * (512 + 1024) * 2L * 32 * 8 * 128 * 2;
        long sampling = sequences * 128256L * 4;
        assertEquals(cache + sampling, e.term("kv_cache").in(Phase.GENERATION));
        assertEquals(0, e.term("gradients").in(Phase.GENERATION));
        // Training sees prompt + completion per sequence; logits only over completion positions.
        assertEquals(2L * 1024 * 128256 * 8, e.term("logits").in(Phase.FORWARD_BACKWARD));
    }

    /**
     * The terms a rank counts in its own tensors (finetune_worker/memory.py): QLoRA's NF4 linears are weights there,
     * a full fine-tune has no adapter, and the figures are per device after the optimizer step (sharded).
     */
    @Test
    void tensorTermsAreWhatARankHoldsAfterTheOptimizerStep() {
        MemoryEstimate qlora = MemoryModel.estimate(setup(LLAMA_8B, QLORA, PrecisionRegime.MIXED_FP32_MASTER,
                new Recipe.Objective.Sft(), Sharding.FSDP_FULL_SHARD, 4));
        assertEquals(List.of("weights", "adapter", "gradients", "optimizer_state"), List.copyOf(qlora.tensorTerms().keySet()));
        assertEquals(qlora.term("weights").in(Phase.OPTIMIZER_STEP) + qlora.term("weights_nf4").in(Phase.OPTIMIZER_STEP),
                qlora.tensorTerms().get("weights"));
        MemoryEstimate full = MemoryModel.estimate(setup(LLAMA_8B, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE,
                new Recipe.Objective.Sft(), Sharding.FSDP_FULL_SHARD, 4));
        assertEquals(List.of("weights", "gradients", "optimizer_state"), List.copyOf(full.tensorTerms().keySet()));
        long p = LLAMA_8B.parameterCount();
        assertEquals(p * 2 / 4.0, full.tensorTerms().get("gradients"), 1);
        assertEquals(p * 2 * 2 / 4.0, full.tensorTerms().get("optimizer_state"), 1);
    }

    /**
     * FSDP2 splits each tensor's dim 0 in pieces of ⌈rows / ranks⌉ and pads every rank's storage to that: the plan
     * describes the first rank, which fills them. Over 8 ranks every dim of Llama 3.1 8B divides, so that is the total
     * over 8; Qwen2.5-7B's LoRA A has 16 rows, 6 per rank over 3 ranks, and its hidden size of 3584 does not divide by 3
     * (WorkerMetaTermsTest counts the same bytes in the worker's own shards).
     */
    @Test
    void aShardedTermIsTheFirstRanksPaddedRows() {
        long p = LLAMA_8B.parameterCount();
        MemoryEstimate even = MemoryModel.estimate(setup(LLAMA_8B, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE,
                new Recipe.Objective.Sft(), Sharding.FSDP_FULL_SHARD, 8));
        assertEquals(p * 2 / 8, even.tensorTerms().get("weights"));
        assertFalse(even.term("weights").how().contains("padded"), even.term("weights").how());

        ModelConfig qwen = KnownModels.lookup("Qwen/Qwen2.5-7B").orElseThrow();
        MemoryEstimate uneven = MemoryModel.estimate(setup(qwen, LORA, PrecisionRegime.MIXED_FP32_MASTER,
                new Recipe.Objective.Sft(), Sharding.FSDP_FULL_SHARD, 3));
        long h = 3584, kv = 512, ffn = 18944;
        // per layer, A [16, in] and B [out, 16] of q, k, v, o, gate, up, down: 6 of A's 16 rows, ⌈out / 3⌉ of B's
        long[][] inOut = {{h, h}, {h, kv}, {h, kv}, {h, h}, {h, ffn}, {h, ffn}, {ffn, h}};
        long adapter = 0;
        for (long[] linear : inOut) {
            adapter += 6 * linear[0] + (linear[1] + 2) / 3 * 16;
        }
        assertEquals(28 * adapter * 4, uneven.tensorTerms().get("adapter"));
        assertEquals(28 * adapter * 4, uneven.tensorTerms().get("gradients"));
        assertEquals(28 * adapter * 4 * 2, uneven.tensorTerms().get("optimizer_state"));
        long lora = qwen.parameters().loraTrainable(LORA);
        assertTrue(28 * adapter * 3 > lora, "the padded rows are more than a third");
        assertTrue(uneven.term("adapter").how().contains("padded to a multiple of 3"), uneven.term("adapter").how());
        assertTrue(uneven.tensorTerms().get("weights") > qwen.parameterCount() * 2 / 3, "3584 rows do not divide by 3");
    }

    @Test
    void eightBitAdamKeepsSmallTensorsIn32Bits() {
        TrainingSetup adamw = new TrainingSetup("test", LLAMA_3B, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE,
                Optimizer.ADAMW_TORCH, 1, 1, 512, true, new Recipe.Objective.Sft(), Sharding.SINGLE, Devices.gpus(1, 1, 80 * GIB), Kernels.ours(), new ReferenceModel.None());
        TrainingSetup eightBit = new TrainingSetup("test", LLAMA_3B, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE,
                Optimizer.ADAMW_BNB_8BIT, 1, 1, 512, true, new Recipe.Objective.Sft(), Sharding.SINGLE, Devices.gpus(1, 1, 80 * GIB), Kernels.ours(), new ReferenceModel.None());
        long p = LLAMA_3B.parameterCount();
        long small = LLAMA_3B.parameters().inSmallTensors(4096);
        assertEquals((28 * 2 + 1) * 3072L, small, "the RMSNorm vectors of 3072 values are under min_8bit_size");
        long expected = small * 8 + Math.round((p - small) * 2 * (1 + 4.0 / 2048));
        assertEquals(expected, MemoryModel.estimate(eightBit).term("optimizer_state").in(Phase.OPTIMIZER_STEP));
        assertEquals(4 * p, MemoryModel.estimate(adamw).term("optimizer_state").in(Phase.OPTIMIZER_STEP));
    }

    /**
     * The worker's LoRA on CPU ranks with a tied table (finetune_worker.vocab_parallel): the frozen table stays in rows,
     * so the SFT step gathers no table and each rank's chunk of logits covers its rows of the vocabulary; DPO's head
     * and a full fine-tune still gather it. Loading gathers nothing, and each rank maps only its rows of the files.
     */
    @Test
    void aFrozenTiedTableStaysInRowsOverCpuRanks() {
        Kernels worker = new Kernels(Kernels.Layers.EAGER, Kernels.Loss.HEAD_INSIDE_CHUNKED);
        java.util.function.BiFunction<AdapterSpec, Recipe.Objective, MemoryEstimate> on2 = (adapter, objective) ->
                MemoryModel.estimate(new TrainingSetup("test", LLAMA_3B, adapter, PrecisionRegime.FP32, Optimizer.ADAMW_TORCH,
                        1, 1, 512, false, objective, Sharding.FSDP_FULL_SHARD, Devices.cpuRanks(2, 1, 64 * GIB), worker,
                        ReferenceModel.of(objective, adapter, null)));
        MemoryEstimate sft = on2.apply(LORA, new Recipe.Objective.Sft());
        long vocab = LLAMA_3B.vocabSize();
        long rows = Math.min(2 * 512, Kernels.headChunkRows(vocab));
        assertEquals(rows * ((vocab + 1) / 2) * 4, sft.term("logits").in(Phase.FORWARD_BACKWARD));
        assertTrue(sft.term("fsdp_buffers").how().contains("the tied table stays in rows"), sft.term("fsdp_buffers").how());
        assertEquals(0, sft.term("fsdp_buffers").in(Phase.LOAD));
        assertEquals((2 * LLAMA_3B.parameterCount() + 1) / 2, sft.term("load_staging").in(Phase.LOAD));
        long table = vocab * LLAMA_3B.hiddenSize() * 4;
        for (MemoryEstimate gathers : List.of(on2.apply(LORA, RecipeSetupTest.dpo()), on2.apply(new AdapterSpec.Full(),
                new Recipe.Objective.Sft()))) {
            assertTrue(gathers.term("fsdp_buffers").how().contains("embedding/head"), gathers.term("fsdp_buffers").how());
            assertTrue(gathers.term("fsdp_buffers").in(Phase.FORWARD_BACKWARD) >= table, gathers.term("fsdp_buffers").how());
        }
        assertTrue(sft.term("fsdp_buffers").in(Phase.FORWARD_BACKWARD) < table, sft.term("fsdp_buffers").how());
    }

    @Test
    void cpuRunsCountTheMappedCheckpointAndTheRuntime() {
        TrainingSetup cpu = new TrainingSetup("test", LLAMA_3B, LORA, PrecisionRegime.FP32, Optimizer.ADAMW_TORCH, 1, 1, 512, false,
                new Recipe.Objective.Sft(), Sharding.SINGLE, Devices.cpu(16 * GIB), Kernels.ours(), new ReferenceModel.None());
        MemoryEstimate e = MemoryModel.estimate(cpu);
        assertEquals(4 * LLAMA_3B.parameterCount(), e.term("weights").in(Phase.LOAD));
        assertEquals(2 * LLAMA_3B.parameterCount(), e.term("load_staging").in(Phase.LOAD));
        assertEquals(MemoryModel.JVM_AND_LIBTORCH, e.term("runtime").in(Phase.LOAD));
        assertEquals(null, e.term("cuda_context"));
        assertEquals(16 * GIB, e.capacityBytes());
        assertThrows(UserError.class, () -> cpu.withSharding(Sharding.DDP, Devices.cpu(GIB)));
    }

    @Test
    void jsonCarriesTheRequiredKeys() {
        MemoryPlan plan = MemoryPlan.of(setup(LLAMA_8B, new AdapterSpec.Full(), PrecisionRegime.BF16_PURE, new Recipe.Objective.Sft(), Sharding.SINGLE, 1)
                .withCheckpointing(false));
        JsonObject o = JsonParser.parseString(PlanJson.render(plan)).getAsJsonObject();
        assertEquals(plan.estimate().peakBytes(), o.get("peak_bytes").getAsLong());
        assertEquals("forward_backward", o.get("peak_phase").getAsString());
        assertEquals(80 * GIB, o.get("capacity_bytes").getAsLong());
        assertFalse(o.get("fits").getAsBoolean());
        assertEquals(plan.estimate().term("weights").in(Phase.FORWARD_BACKWARD), o.getAsJsonObject("terms").get("weights").getAsLong());
        JsonObject batch = o.getAsJsonObject("batch");
        assertEquals(2, batch.get("micro").getAsInt());
        assertEquals(1, batch.get("ranks").getAsInt());
        assertEquals(4, batch.get("accumulation").getAsInt());
        assertEquals(8, batch.get("global").getAsInt());
        assertTrue(o.getAsJsonArray("remedies").size() > 0);
    }

    @Test
    void remediesAreRankedByCostAndEachFits() {
        // 8B LoRA, long sequences, no checkpointing, on a 24 GiB card: micro batch and checkpointing both help.
        TrainingSetup big = new TrainingSetup("test", LLAMA_8B, LORA, PrecisionRegime.BF16_PURE, Optimizer.ADAMW_TORCH, 4, 1, 4096,
                false, new Recipe.Objective.Sft(), Sharding.SINGLE, Devices.gpus(1, 1, 24 * GIB), Kernels.ours(), new ReferenceModel.None());
        MemoryPlan plan = MemoryPlan.of(big);
        assertFalse(plan.estimate().fits());
        List<String> changes = plan.remedies().stream().map(Remedy::change).toList();
        // Neither a smaller micro batch nor checkpointing suffices alone; together they beat QLoRA and truncation.
        assertTrue(changes.get(0).contains("gradient_checkpointing: true") && changes.get(0).contains("micro_batch_size"),
                changes.toString());
        for (Remedy r : plan.remedies()) {
            assertTrue(r.result().fits(), r.change());
            assertTrue(r.result().peakBytes() < plan.estimate().peakBytes());
        }
        int qlora = changes.indexOf(changes.stream().filter(c -> c.startsWith("adapter: qlora")).findFirst().orElse(""));
        int sequence = changes.indexOf(changes.stream().filter(c -> c.startsWith("sequence_len")).findFirst().orElse(""));
        assertTrue(qlora < 0 || sequence < 0 || qlora < sequence, changes.toString());
        System.out.println(PlanText.render(plan));
    }

    @Test
    void sizesAndMeminfoParse(@TempDir Path dir) throws IOException {
        assertEquals(80 * GIB, MemorySize.parse("80GiB", "k"));
        assertEquals(80 * GIB, MemorySize.parse("80G", "k"));
        assertEquals(40_000_000_000L, MemorySize.parse("40 GB", "k"));
        assertEquals(512L << 20, MemorySize.parse("512MiB", "k"));
        assertThrows(UserError.class, () -> MemorySize.parse("lots", "gpu_memory"));
        assertThrows(UserError.class, () -> MemorySize.parse("80 parsecs", "gpu_memory"));
        Path meminfo = dir.resolve("meminfo");
        Files.writeString(meminfo, "MemTotal:       16315060 kB\nMemFree:         1000 kB\n");
        assertEquals(16315060L * 1024, Devices.memTotal(meminfo));
        assertTrue(Devices.thisMachine().capacityPerDevice() > 0);
    }
}
