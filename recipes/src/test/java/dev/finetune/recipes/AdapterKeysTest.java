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

/** The rules between adapter: and the lora_* keys, built on the values as read (each key is read once). */
class AdapterKeysTest {

    static List<String> errors(Path dir, String keys) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}\n");
        Path file = dir.resolve("r.yaml");
        Files.writeString(file, """
                base_model: meta-llama/Llama-3.1-8B
                datasets:
                  - path: d.jsonl
                    type: alpaca
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                sequence_len: 128
                learning_rate: 0.0002
                """ + keys);
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(file, List.of()));
        return e.errors().stream().map(Finding::oneLine).toList();
    }

    @Test
    void loraKeysWithoutAnAdapterAreAllNamedInOneError(@TempDir Path dir) throws IOException {
        List<String> errors = errors(dir, "lora_alpha: 16\nlora_target_linear: false\nlora_r: 8\n");
        assertEquals(1, errors.size(), errors.toString());
        assertTrue(errors.get(0).contains("lora_r, lora_alpha, lora_target_linear set but no adapter"), errors.get(0));
    }

    @Test
    void aRefusedRankIsReportedOnceNotAsMissingNorAsSet(@TempDir Path dir) throws IOException {
        List<String> lora = errors(dir, "adapter: lora\nlora_r: eight\nlora_alpha: 16\nlora_target_linear: true\n");
        assertEquals(1, lora.size(), lora.toString());
        assertTrue(lora.get(0).contains("lora_r must be a whole number"), lora.get(0));
        List<String> none = errors(dir, "lora_r: eight\n");
        assertEquals(1, none.size(), none.toString());
        assertTrue(none.get(0).contains("lora_r must be a whole number"), none.get(0));
    }

    @Test
    void anAdapterWithoutRankOrAlphaAsksForThem(@TempDir Path dir) throws IOException {
        List<String> errors = errors(dir, "adapter: lora\nlora_target_linear: true\n");
        assertEquals(2, errors.size(), errors.toString());
        assertTrue(errors.get(0).contains("adapter: lora needs lora_r"), errors.get(0));
        assertTrue(errors.get(1).contains("adapter: lora needs lora_alpha"), errors.get(1));
    }

    @Test
    void unfrozenParametersIsRefusedWithAWayOutThatFitsTheAdapter(@TempDir Path dir) throws IOException {
        String patterns = "unfrozen_parameters:\n  - ^model.language_model.*\n  - ^lm_head.*\n";
        // Axolotl's gemma3 QLoRA examples: the base is frozen already, so "use adapter: lora" would send them sideways
        List<String> qlora = errors(dir, patterns + "adapter: qlora\nload_in_4bit: true\nlora_r: 32\nlora_alpha: 16\n"
                + "lora_target_linear: true\n");
        assertEquals(1, qlora.size(), qlora.toString());
        assertTrue(qlora.get(0).contains("'unfrozen_parameters' is unsupported"), qlora.get(0));
        assertTrue(qlora.get(0).contains("hint: remove it: with adapter: qlora the base weights stay frozen"), qlora.get(0));
        assertTrue(!qlora.get(0).contains("use adapter: lora"), qlora.get(0));
        List<String> full = errors(dir, patterns);
        assertEquals(1, full.size(), full.toString());
        assertTrue(full.get(0).contains("hint: remove it for a full fine-tune (every weight trains), or use adapter: lora"),
                full.get(0));
        // written empty it asks for nothing, as every unsupported key
        List<String> off = errors(dir, "unfrozen_parameters: []\nlora_r: eight\n");
        assertEquals(1, off.size(), off.toString());
        assertTrue(off.get(0).contains("lora_r must be a whole number"), off.get(0));
    }

    @Test
    void warmupStepsAndRatioTogetherAreOneErrorUnlessOneWasRefused(@TempDir Path dir) throws IOException {
        String adapter = "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\n";
        List<String> both = errors(dir, adapter + "warmup_steps: 10\nwarmup_ratio: 0.1\n");
        assertEquals(1, both.size(), both.toString());
        assertTrue(both.get(0).contains("warmup_steps and warmup_ratio are both set"), both.get(0));
        List<String> refused = errors(dir, adapter + "warmup_steps: 10\nwarmup_ratio: 2\n");
        assertEquals(1, refused.size(), refused.toString());
        assertTrue(refused.get(0).contains("warmup_ratio must be between 0 and 1"), refused.get(0));
    }
}
