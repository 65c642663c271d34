package dev.finetune.recipes.plan;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.InvalidRecipe;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Time and cost from a recipe's hardware: block, through the one path plan and the trainer take. */
class RunPlanTest {

    static RunPlan plan(Path dir, String yaml) throws IOException {
        Path file = dir.resolve("r.yaml");
        Files.writeString(file, yaml);
        ValidatedRecipe v = ValidatedRecipe.load(file, List.of());
        return RunPlan.of(v, dir, null, null, null);
    }

    /**
     * Llama-3.1-8B LoRA r=16 on all linears, 2 × 2048 × 8 accumulation, 1000 steps on one H100 (the torch worker's,
     * whose causal attention per document skips the blocks above the diagonal: A). N = 7,504,658,432 (TimeModelTest),
     * A = 2 · 32 · 4096 · 2048 = 536,870,912, adapters 83,886,080: 4N + 3·A + 3·adapters = 31,880,904,704 FLOPs per
     * token; 989 TFLOPS × 0.4 / that = 12,408.7 tokens/s; 32,768,000 tokens take 2641 s = 44 min, $1.83 at $2.50.
     */
    @Test
    void anEightBillionLoraRecipeOnOneH100(@TempDir Path dir) throws IOException {
        RunPlan run = plan(dir, """
                base_model: meta-llama/Llama-3.1-8B
                datasets: [{path: yahma/alpaca-cleaned, type: alpaca}]
                adapter: lora
                lora_r: 16
                lora_alpha: 32
                lora_target_linear: true
                sequence_len: 2048
                micro_batch_size: 2
                gradient_accumulation_steps: 8
                max_steps: 1000
                learning_rate: 2e-4
                bf16: true
                hardware: {gpus: 1, gpu_type: H100, cost_per_gpu_hour: 2.5}
                """);
        long perToken = 4L * 7_504_658_432L + 3L * 536_870_912L + 3L * 83_886_080L;
        assertEquals(31_880_904_704L, perToken);
        assertEquals(perToken, run.time().flops().perToken(), 1);
        assertEquals(989e12 * 0.4 / perToken, run.time().tokensPerSecondPerDevice(), 1e-6);
        assertEquals(1000L, run.time().totalSteps());
        assertEquals(1000 * 32_768 / (989e12 * 0.4 / perToken) / 3600 * 2.5, run.time().cost(), 1e-9);
        assertEquals(80L << 30, run.memory().estimate().capacityBytes(), "gpu_memory from the table");
        String text = run.describeTime();
        assertTrue(text.contains("12,409 tokens/s per device × 1 device"), text);
        assertTrue(text.contains("44 min wall; $1.83 at $2.50 per GPU-hour × 1 GPU"), text);
    }

    /**
     * Llama-3.1-70B full fine-tune under FSDP on 8 H100s, checkpointing on, 1 × 2048 × 4 accumulation per rank:
     * 6N + 3A + (2·decoder + A) = 564,649,787,392 FLOPs per token (TimeModelTest); 700.6 tokens/s per GPU, with
     * utilisation 0.5 given in the recipe 875.8.
     */
    @Test
    void aSeventyBillionFsdpRecipeOnEightH100s(@TempDir Path dir) throws IOException {
        RunPlan run = plan(dir, """
                base_model: meta-llama/Llama-3.1-70B
                datasets: [{path: yahma/alpaca-cleaned, type: alpaca}]
                sequence_len: 2048
                micro_batch_size: 1
                gradient_accumulation_steps: 4
                max_steps: 500
                learning_rate: 1e-5
                bf16: true
                gradient_checkpointing: true
                fsdp_version: 2
                fsdp_config: {reshard_after_forward: true, transformer_layer_cls_to_wrap: LlamaDecoderLayer}
                hardware: {gpus: 8, gpu_type: h100-sxm, utilization: 0.5}
                """);
        long perToken = 564_649_787_392L;
        assertEquals(perToken, run.time().flops().perToken(), 1);
        assertEquals(989e12 * 0.5 / perToken, run.time().tokensPerSecondPerDevice(), 1e-9);
        assertEquals(8, run.time().devices());
        assertEquals(8L * 4 * 2048, run.time().tokensPerStep());
        assertNull(run.time().cost());
    }

    @Test
    void withoutAGpuModelThePlanSaysWhatToAdd(@TempDir Path dir) throws IOException {
        RunPlan run = plan(dir, """
                base_model: meta-llama/Llama-3.1-8B
                datasets: [{path: yahma/alpaca-cleaned, type: alpaca}]
                adapter: lora
                lora_r: 16
                lora_alpha: 32
                lora_target_linear: true
                sequence_len: 2048
                micro_batch_size: 2
                gradient_accumulation_steps: 8
                learning_rate: 2e-4
                hardware: {gpus: 1, gpu_memory: 80GiB}
                """);
        assertNull(run.time());
        assertTrue(run.describeTime().contains("hardware.gpu_type: H100"), run.describeTime());
    }

    @Test
    void anUnknownGpuIsAnErrorWithDidYouMean(@TempDir Path dir) {
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> plan(dir, """
                base_model: meta-llama/Llama-3.1-8B
                datasets: [{path: yahma/alpaca-cleaned, type: alpaca}]
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                learning_rate: 1e-5
                hardware: {gpus: 1, gpu_type: H10}
                """));
        String line = e.errors().get(0).oneLine();
        assertTrue(line.contains("hardware.gpu_type 'H10' is not in the plan's device table"), line);
        assertTrue(line.contains("did you mean"), line);
    }

    /** {@code plan --json} carries the numbers the text prints: per-token FLOPs, tokens/s, wall time and cost. */
    @Test
    void theJsonPlanHasTheTimeAndCostOfTheTextPlan(@TempDir Path dir) throws IOException {
        RunPlan run = plan(dir, """
                base_model: meta-llama/Llama-3.1-8B
                datasets: [{path: yahma/alpaca-cleaned, type: alpaca}]
                adapter: lora
                lora_r: 16
                lora_alpha: 32
                lora_target_linear: true
                sequence_len: 2048
                micro_batch_size: 2
                gradient_accumulation_steps: 8
                max_steps: 1000
                learning_rate: 2e-4
                bf16: true
                hardware: {gpus: 1, gpu_type: H100, cost_per_gpu_hour: 2.5}
                """);
        JsonObject time = JsonParser.parseString(PlanJson.render(run)).getAsJsonObject().getAsJsonObject("time");
        assertEquals(31_880_904_704.0, time.get("flops_per_token").getAsDouble(), 1);
        assertEquals(989e12 * 0.4 / 31_880_904_704.0, time.get("tokens_per_second_per_device").getAsDouble(), 1e-6);
        assertEquals(32_768, time.get("tokens_per_step").getAsLong());
        assertEquals(1000, time.get("total_steps").getAsLong());
        assertEquals(32_768_000.0, time.get("total_tokens").getAsDouble());
        assertEquals(run.time().totalSeconds(), time.get("wall_seconds").getAsDouble(), 1e-9);
        assertEquals(2641, time.get("wall_seconds").getAsDouble(), 1);
        assertEquals(2.5, time.get("cost_per_gpu_hour").getAsDouble());
        assertEquals(1.83, time.get("cost").getAsDouble(), 0.005);
        assertEquals(1, time.get("devices").getAsInt());
        assertTrue(time.get("device").getAsString().startsWith("H100-SXM"), time.toString());

        RunPlan unpriced = plan(dir, """
                base_model: meta-llama/Llama-3.1-8B
                datasets: [{path: yahma/alpaca-cleaned, type: alpaca}]
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                learning_rate: 1e-5
                hardware: {gpus: 1, gpu_memory: 80GiB}
                """);
        JsonObject o = JsonParser.parseString(PlanJson.render(unpriced)).getAsJsonObject();
        assertTrue(o.get("time").isJsonNull());
        assertTrue(o.get("time_note").getAsString().contains("hardware.gpu_type"), o.toString());
    }

    /**
     * On a CPU the step is the matmuls at the measured GEMM rate plus the engine's calls and memory-bound traffic
     * (CpuOverhead). The quickstart's shape (stories260K: 5 layers, dim 64, 8 heads, 4 KV heads, MLP 172, vocab 512;
     * LoRA r=8 on the 7 projections, micro batch 4 × 256 tokens, one micro step) with rates given here: 100 GFLOPS,
     * 10 GB/s, 10 µs per call. Calls: 80 + 62 · 5 layers + 6 · 35 adapted linears = 600 in the forward, and
     * 15 × 70 LoRA tensors after backward: 1650. Attention scores: 14 passes × 5 layers × 4 × 8 heads × 256² × 4 B
     * = 587,202,560 B.
     */
    @Test
    void onACpuTheEngineCallsAndTheAttentionScoresAreCharged(@TempDir Path dir) throws IOException {
        Path config = dir.resolve("config.json");
        Files.writeString(config, """
                {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 5,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 172,
                 "rms_norm_eps": 1e-5, "max_position_embeddings": 512, "tie_word_embeddings": false, "torch_dtype": "float32"}""");
        Files.writeString(dir.resolve("d.jsonl"), "{\"text\": \"Once upon a time\"}\n");
        Path file = dir.resolve("r.yaml");
        Files.writeString(file, """
                base_model: ./
                datasets: [{path: d.jsonl, type: completion}]
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_target_linear: true
                sequence_len: 256
                sample_packing: true
                micro_batch_size: 4
                gradient_accumulation_steps: 1
                max_steps: 100
                learning_rate: 3e-3
                hardware: cpu
                backend: single
                """);
        ValidatedRecipe v = ValidatedRecipe.load(file, List.of());
        RunPlan.CpuRate rates = new RunPlan.CpuRate() {
            @Override
            public double flops(dev.finetune.recipes.model.ModelConfig model, long tokens) {
                return 100e9;
            }

            @Override
            public String how(dev.finetune.recipes.model.ModelConfig model, long tokens) {
                return "given";
            }

            @Override
            public double bandwidth() {
                return 10e9;
            }

            @Override
            public double secondsPerCall() {
                return 10e-6;
            }
        };
        RunPlan run = RunPlan.of(v, dir, null, null, rates);
        CpuOverhead overhead = run.time().overhead();
        assertEquals(600 + 15 * 70, overhead.calls());
        // The trainer's fused attention keeps no [B, heads, T, T] scores, and its SFT loss applies the (plain, fp32)
        // LM head itself over chunks of 64 Mi logits: here all 1,024 positions fit in one, 4 B each, and no logits
        // gradient; but every score is still computed and worked.
        MemoryEstimate memory = run.memory().estimate();
        assertTrue(memory.terms().stream().noneMatch(t -> t.name().equals("attention_weights")), memory.terms().toString());
        assertEquals(4L * 256 * 512 * 4, memory.term("logits").in(Phase.FORWARD_BACKWARD));
        // a vocabulary of 262,144 makes chunks of 256 positions: only one chunk is counted
        Path large = Files.createDirectories(dir.resolve("large"));
        Files.writeString(large.resolve("config.json"), Files.readString(config).replace("\"vocab_size\": 512",
                "\"vocab_size\": 262144"));
        Files.copy(dir.resolve("d.jsonl"), large.resolve("d.jsonl"));
        Files.copy(file, large.resolve("r.yaml"));
        ValidatedRecipe largeRecipe = ValidatedRecipe.load(large.resolve("r.yaml"), List.of());
        RunPlan largeVocabulary = RunPlan.of(largeRecipe, large, null, null, rates);
        assertEquals(4L * 256 * 262144, largeVocabulary.memory().estimate().term("logits").in(Phase.FORWARD_BACKWARD));
        // with LoRA on lm_head the logits come out of the adapted head, and their gradient goes back into it: 8 B
        RunPlan adaptedHead = RunPlan.of(ValidatedRecipe.load(file, List.of("lora_target_modules=[lm_head]")), dir,
                null, null, rates);
        assertEquals(4L * 256 * 512 * 8, adaptedHead.memory().estimate().term("logits").in(Phase.FORWARD_BACKWARD));
        double scores = 14.0 * 5 * 4 * 8 * 256 * 256 * 4;
        assertEquals(587_202_560.0, scores);
        assertTrue(overhead.bytes() > scores, overhead.how());
        double matmuls = 1024 * run.time().flops().perToken() / 100e9;
        double expected = matmuls + 1650 * 10e-6 + overhead.bytes() / 10e9;
        assertEquals(expected, run.time().secondsPerStep(), 1e-12);
        assertEquals(1024 / expected, run.time().tokensPerSecondPerDevice(), 1e-9);
        assertTrue(run.time().overheadSecondsPerStep() > matmuls, "on a tiny model the overhead sets the step");
        JsonObject time = JsonParser.parseString(PlanJson.render(run)).getAsJsonObject().getAsJsonObject("time");
        assertEquals(1650, time.get("calls_per_step").getAsLong());
        assertEquals(10e-6, time.get("seconds_per_call").getAsDouble(), 1e-15);
        assertTrue(time.get("cost").isJsonNull());
        assertTrue(run.describeTime().contains("1,650 engine calls"), run.describeTime());
    }
}
