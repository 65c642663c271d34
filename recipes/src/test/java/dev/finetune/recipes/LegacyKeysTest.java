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

/**
 * Keys an earlier Axolotl defined and today's drops are ignored with a warning, as Axolotl does; a key a typo away
 * from a current key, or one that was never Axolotl's, stays an error with a did-you-mean.
 */
class LegacyKeysTest {

    static final String RECIPE = """
            base_model: m
            datasets:
              - path: d.jsonl
                type: alpaca
            adapter: lora
            lora_r: 8
            lora_alpha: 16
            lora_target_linear: true
            micro_batch_size: 1
            gradient_accumulation_steps: 1
            sequence_len: 128
            learning_rate: 0.0002
            num_epochs: 1
            """;

    static ValidatedRecipe load(Path dir, String extra) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}\n");
        Path file = dir.resolve("r.yaml");
        Files.writeString(file, RECIPE + extra);
        return ValidatedRecipe.load(file, List.of());
    }

    @Test
    void keysAnEarlierAxolotlDefinedAreIgnoredWithAWarning(@TempDir Path dir) throws IOException {
        ValidatedRecipe v = load(dir, "gptq_groupsize: 128\ngptq_model_v1: false\ndebug: true\ntrl:\n  vllm_device: auto\n");
        List<String> warnings = v.warnings().stream().map(Finding::oneLine).toList();
        for (String key : List.of("gptq_groupsize", "gptq_model_v1", "debug", "trl.vllm_device")) {
            String line = warnings.stream().filter(w -> w.contains("'" + key + "' is ignored, as Axolotl does")).findFirst()
                    .orElseThrow(() -> new AssertionError(key + " not warned: " + warnings));
            assertTrue(line.contains("r.yaml:"), line);
        }
        assertEquals(RecipeKeys.Status.LEGACY, RecipeKeys.get("gptq_groupsize").status());
    }

    @Test
    void anOldKeyATypoAwayFromACurrentKeyIsAnErrorWithDidYouMean(@TempDir Path dir) {
        // Axolotl documented sample_pack_sequentially until 2025-06; today's key is sample_packing_sequentially.
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> load(dir, "sample_pack_sequentially: true\n"));
        String line = e.errors().get(0).oneLine();
        assertTrue(line.contains("unknown key 'sample_pack_sequentially' (an old Axolotl key that Axolotl now drops"), line);
        assertTrue(line.contains("did you mean 'sample_packing_sequentially'?"), line);
    }

    @Test
    void aKeyThatWasNeverAxolotlsIsAnErrorWithDidYouMean(@TempDir Path dir) {
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> load(dir, "adam_eps: 1.0e-8\nlearnig_rat: 0.001\n"));
        List<String> lines = e.errors().stream().map(Finding::oneLine).toList();
        assertTrue(lines.stream().anyMatch(l -> l.contains("unknown key 'adam_eps'") && l.contains("did you mean 'adam_epsilon'?")), lines.toString());
        assertTrue(lines.stream().anyMatch(l -> l.contains("unknown key 'learnig_rat'") && l.contains("did you mean 'learning_rate'?")), lines.toString());
    }
}
