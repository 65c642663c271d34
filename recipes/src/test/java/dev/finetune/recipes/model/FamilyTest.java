package dev.finetune.recipes.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
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
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class FamilyTest {

    @Test
    void anArchitectureNotKnownIsAnErrorAtValidateNamingTheSupportedOnes(@TempDir Path dir) throws IOException {
        Path model = Files.createDirectories(dir.resolve("model"));
        Files.writeString(model.resolve("config.json"), """
                {"model_type": "falcon", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "vocab_size": 100}""");
        Path recipe = dir.resolve("recipe.yaml");
        Files.writeString(recipe, """
                base_model: ./model
                datasets:
                  - path: data.jsonl
                    type: alpaca
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                num_epochs: 1
                learning_rate: 0.0001
                sequence_len: 64
                output_dir: ./out
                """);
        Files.writeString(dir.resolve("data.jsonl"), "{\"instruction\": \"a\", \"output\": \"b\"}\n");
        InvalidRecipe bad = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(recipe, List.of()));
        String line = bad.errors().get(0).oneLine();
        assertTrue(line.contains("model_type 'falcon'") && line.contains("config.json"), line);
        assertTrue(line.contains("llama, mistral") && line.contains("gemma2") && line.contains("qwen3_moe"), line);
    }

    @Test
    void aVisionLanguageGemma3PointsAtItsTextSiblings(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("config.json"), """
                {"model_type": "gemma3", "text_config": {"hidden_size": 64}, "hidden_size": 64, "intermediate_size": 8,
                 "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 10}""");
        var error = assertThrows(dev.finetune.recipes.UserError.class, () -> ModelConfig.read(dir));
        assertTrue(error.oneLine().contains("gemma3_text"), error.oneLine());
    }

    /**
     * Published totals of hub models of the newer families, and for MoE the active parameters per token their makers
     * quote (Mixtral "12.9B active", Qwen3-30B-A3B "3.3B activated", Qwen1.5-MoE-A2.7B "2.7B activated").
     */
    @ParameterizedTest(name = "{0}")
    @CsvSource({
        "mistralai/Mixtral-8x7B-v0.1, 46702792704, 12.9",
        "Qwen/Qwen3-30B-A3B, 30532122624, 3.3",
        "Qwen/Qwen1.5-MoE-A2.7B, 14315784192, 2.7",
        "google/gemma-2-2b, 2614341888, 0",
        "google/gemma-3-1b-pt, 999885952, 0",
        "microsoft/phi-4, 14659507200, 0",
        "allenai/OLMo-2-1124-7B, 7298617344, 0",
        "ibm-granite/granite-3.1-8b-base, 8170848256, 0",
    })
    void newerFamiliesMatchTheirPublishedSizes(String name, long total, double activeBillions) {
        ModelParameters p = KnownModels.lookup(name).orElseThrow().parameters();
        assertEquals(total, p.total(), name);
        if (activeBillions > 0) {
            // quoted to one decimal, some rounded, some cut (Qwen3-30B-A3B's 3.35 as "3.3B")
            double active = p.active() / 1e9;
            assertTrue(active > activeBillions - 0.05 && active < activeBillions + 0.1, name + " active per token: " + active);
        } else {
            assertEquals(p.total(), p.active(), name + " is dense");
        }
    }

    @Test
    void slidingWindowsOfTheTableAreWhatTheConfigsSay() {
        assertEquals(null, KnownModels.lookup("mistralai/Mistral-7B-v0.3").orElseThrow().slidingWindow());
        assertEquals(4096, KnownModels.lookup("mistralai/Mistral-7B-v0.1").orElseThrow().slidingWindow().size());
        ModelConfig.SlidingWindow gemma3 = KnownModels.lookup("google/gemma-3-1b-it").orElseThrow().slidingWindow();
        // five local layers to one global
        assertEquals(512, gemma3.size());
        assertEquals(22, gemma3.slidingLayers());
        // every other layer of 42
        assertEquals(21, KnownModels.lookup("google/gemma-2-9b").orElseThrow().slidingWindow().slidingLayers());
    }
}
