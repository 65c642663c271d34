package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Findings a user reads: one per reason, no second error for the same mistake, suggestions only for slips. */
class WarningsTest {
    static final String BASE = "base_model: org/model\nlearning_rate: 1e-4\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\n"
            + "datasets: [{path: d.jsonl, type: alpaca}]\n";

    static ValidatedRecipe valid(Path dir, String extra) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{}\n");
        Files.writeString(dir.resolve("r.yaml"), BASE + extra);
        return ValidatedRecipe.load(dir.resolve("r.yaml"), List.of());
    }

    static InvalidRecipe invalid(Path dir, String extra) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{}\n");
        Files.writeString(dir.resolve("r.yaml"), BASE + extra);
        return assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(dir.resolve("r.yaml"), List.of()));
    }

    @Test
    void keysIgnoredForOneReasonAreOneWarning(@TempDir Path dir) throws IOException {
        List<Finding> warnings = valid(dir, "attn_implementation: sdpa\nflash_attention: true\nsdp_attention: true\n"
                + "wandb_project: x\n").warnings();
        assertEquals(2, warnings.size(), warnings.toString());
        assertEquals("'attn_implementation', 'flash_attention' and 'sdp_attention' are ignored (3 keys): an attention, "
                + "kernel or speed choice: finetune picks its own, with the same results", warnings.get(0).message());
        assertTrue(warnings.get(0).where().endsWith("r.yaml:6:1"), warnings.get(0).where());
        assertTrue(warnings.get(1).message().startsWith("'wandb_project' is ignored: logging"), warnings.get(1).message());
    }

    @Test
    void prefixedFsdpKeysAreOneWarning(@TempDir Path dir) throws IOException {
        List<Finding> warnings = valid(dir, "fsdp_version: 2\nfsdp_config:\n  fsdp_offload_params: false\n"
                + "  fsdp_state_dict_type: FULL_STATE_DICT\n  fsdp_reshard_after_forward: true\n").warnings();
        List<Finding> prefix = warnings.stream().filter(w -> w.message().contains("fsdp_ prefix")).toList();
        assertEquals(1, prefix.size(), warnings.toString());
        assertTrue(prefix.get(0).message().contains("(3 keys: fsdp_offload_params, fsdp_state_dict_type, "
                + "fsdp_reshard_after_forward)"), prefix.get(0).message());
    }

    @Test
    void aRefusedRewardEntryIsNotAlsoAMissingList(@TempDir Path dir) throws IOException {
        InvalidRecipe e = invalid(dir, "rl: grpo\nadapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n"
                + "trl:\n  reward_funcs: [no_such_reward]\n");
        assertTrue(e.errors().stream().anyMatch(f -> f.message().contains("no_such_reward")), e.errors().toString());
        assertFalse(e.errors().stream().anyMatch(f -> f.message().contains("needs trl.reward_funcs")), e.errors().toString());
    }

    @Test
    void aRefusedPluginDoesNotAlsoAskForWhatItBrings(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("r.yaml"), "base_model: org/model\nlearning_rate: 1e-4\nmicro_batch_size: 8\n"
                + "gradient_accumulation_steps: 1\nrl: grpo\nplugins: [some.plugin.GymPlugin]\n");
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(dir.resolve("r.yaml"), List.of()));
        assertEquals(1, e.errors().size(), e.errors().toString());
        assertTrue(e.errors().get(0).message().contains("plugin 'GymPlugin' is unsupported"));
    }

    @Test
    void didYouMeanOnlyForSlipsOfTheKeyboard() {
        List<String> optimizers = List.of("adamw_torch", "came_pytorch", "lion_8bit", "sgd");
        assertNull(Suggestions.closest("lion_pytorch", optimizers), "another optimizer, not a misspelt one");
        assertEquals("adamw_torch", Suggestions.closest("adamw_torh", optimizers));
        assertEquals("came_pytorch", Suggestions.closest("came_pytroch", optimizers));
        assertEquals("learning_rate", Suggestions.closest("lerning_rate", List.of("learning_rate", "lr_scheduler")));
        assertNull(Suggestions.closest("eta_max", List.of("beta", "seed")));
    }
}
