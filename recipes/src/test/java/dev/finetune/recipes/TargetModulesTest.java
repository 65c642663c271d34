package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** With a known architecture, every lora_target_modules entry must name one of its linear layers. */
class TargetModulesTest {

    static ValidatedRecipe load(Path dir, String baseModel, String targets) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}\n");
        Path file = dir.resolve("r.yaml");
        Files.writeString(file, """
                base_model: %s
                datasets:
                  - path: d.jsonl
                    type: alpaca
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_target_modules: %s
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                sequence_len: 128
                learning_rate: 0.0002
                """.formatted(baseModel, targets));
        return ValidatedRecipe.load(file, List.of());
    }

    @Test
    void aMisspeltTargetOnAKnownModelIsAnErrorAtItsLineWithDidYouMean(@TempDir Path dir) {
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> load(dir, "meta-llama/Llama-3.1-8B", "[q_prj, v_proj]"));
        assertEquals(1, e.errors().size(), e.errors().toString());
        String line = e.errors().get(0).oneLine();
        assertTrue(line.contains("r.yaml:8:"), line);
        assertTrue(line.contains("lora_target_modules entry 'q_prj' matches no linear layer of this llama model (built-in table)"), line);
        assertTrue(line.contains("did you mean 'q_proj'?"), line);
        assertTrue(line.contains("down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj"), line);
    }

    @Test
    void namesSuffixesAndRegexesThatMatchPass(@TempDir Path dir) throws IOException {
        load(dir, "meta-llama/Llama-3.1-8B", "[q_proj, self_attn.v_proj, 'model\\.layers\\.3[01]\\.mlp\\..*', lm_head]");
    }

    @Test
    void aLocalModelIsCheckedAgainstItsConfigJson(@TempDir Path dir) throws IOException {
        Path model = Files.createDirectories(dir.resolve("phi"));
        Files.writeString(model.resolve("config.json"), """
                {"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100, "max_position_embeddings": 256,
                 "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
                """);
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> load(dir, "phi", "[q_proj, qkv_proj]"));
        String line = e.errors().get(0).oneLine();
        assertTrue(line.contains("entry 'q_proj' matches no linear layer of this phi3 model (its config.json)"), line);
        assertTrue(line.contains("qkv_proj"), line);
    }

    @Test
    void anUnknownRemoteModelIsCheckedAgainstEveryFamilyFinetuneTrains(@TempDir Path dir) throws IOException {
        // no config.json here: any family's names (Phi-3's fused ones too) and regexes are the run's to check
        load(dir, "someone/unknown-model", "[q_proj, qkv_proj, gate_up_proj, '.*attn.*']");
        // Axolotl's MPT examples (replit): names no family has, so the run refuses them whatever the config says
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> load(dir, "someone/unknown-model",
                "[Wqkv, mlp_up, q_proj]"));
        assertEquals(1, e.errors().size(), e.errors().toString());
        String line = e.errors().get(0).oneLine();
        assertTrue(line.contains("r.yaml:8:"), line);
        assertTrue(line.contains("lora_target_modules Wqkv, mlp_up name no linear layer of any architecture finetune "
                + "trains (llama, mistral, "), line);
        assertTrue(line.contains("is unsupported"), line);
        assertTrue(line.contains("o_proj, q_proj, qkv_proj"), line);
    }
}
