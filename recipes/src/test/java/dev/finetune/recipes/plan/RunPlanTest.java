package dev.finetune.recipes.plan;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
        return RunPlan.of(v, dir, null, RecipeSetup.hardware(v.recipe().hardware()), null, null);
    }

    /**
     * Llama-3.1-8B LoRA r=16 on all linears, 2 × 2048 × 8 accumulation, 1000 steps on one H100 (in this JVM's
     * single-device trainer, whose attention computes every score: 2A). N = 7,504,658,432 (TimeModelTest),
     * A = 2 · 32 · 4096 · 2048 = 536,870,912, adapters 83,886,080: 4N + 3·2A + 3·adapters = 33,491,517,440 FLOPs per
     * token; 989 TFLOPS × 0.4 / that = 11,811.7 tokens/s; 32,768,000 tokens take 2774 s = 46 min, $1.93 at $2.50.
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
        long perToken = 4L * 7_504_658_432L + 3L * 2 * 536_870_912L + 3L * 83_886_080L;
        assertEquals(33_491_517_440L, perToken);
        assertEquals(perToken, run.time().flops().perToken(), 1);
        assertEquals(989e12 * 0.4 / perToken, run.time().tokensPerSecondPerDevice(), 1e-6);
        assertEquals(1000L, run.time().totalSteps());
        assertEquals(1000 * 32_768 / (989e12 * 0.4 / perToken) / 3600 * 2.5, run.time().cost(), 1e-9);
        assertEquals(80L << 30, run.memory().estimate().capacityBytes(), "gpu_memory from the table");
        String text = run.describeTime();
        assertTrue(text.contains("11,812 tokens/s per device × 1 device"), text);
        assertTrue(text.contains("46 min wall; $1.93 at $2.50 per GPU-hour × 1 GPU"), text);
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
}
