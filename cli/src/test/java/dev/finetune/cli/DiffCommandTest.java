package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code finetune diff}: recipes that differ by a key, by their {@code base:}, and by an override. */
class DiffCommandTest {

    @Test
    void aChangedKeyShowsWithItsBatchPlanConsequences(@TempDir Path dir) throws IOException {
        Path recipes = ValidateManyTest.repository(dir);
        Path bigger = recipes.resolve("bigger.yaml");
        // four times the tokens per micro step: enough activations more (about 11 MB) to move the peak at 0.01 GiB
        Files.writeString(bigger, Files.readString(recipes.resolve("lora.yaml")).replace("micro_batch_size: 2", "micro_batch_size: 8"));
        InProcess.Run run = InProcess.finetune("diff", recipes.resolve("lora.yaml").toString(), bigger.toString());
        assertEquals(0, run.exit(), run.err());
        assertTrue(run.out().contains("recipe: 1 key differ\n  micro_batch_size: 2 -> 8\n"), run.out());
        // 8 rows: 4 steps per epoch at micro batch 2, 1 at micro batch 8.
        assertTrue(run.out().contains("  batch: micro 2 x ranks 1 x accumulation 1 = global 2 -> micro 8 x ranks 1 x accumulation 1 = global 8"),
                run.out());
        assertTrue(run.out().contains("  steps per epoch: 4 -> 1"), run.out());
        assertTrue(run.out().contains("memory plan:\n") && run.out().contains("  peak per device: "), run.out());
    }

    @Test
    void aDifferentBaseShowsEveryInheritedKeyThatChangesAndDefaultsAreExplicit(@TempDir Path dir) throws IOException {
        Path recipes = ValidateManyTest.repository(dir);
        Files.writeString(recipes.resolve("common-long.yaml"), Files.readString(recipes.resolve("common.yaml"))
                .replace("sequence_len: 64", "sequence_len: 128\nlr_scheduler: linear"));
        Path other = recipes.resolve("lora-long.yaml");
        Files.writeString(other, Files.readString(recipes.resolve("lora.yaml")).replace("base: common.yaml", "base: common-long.yaml"));
        InProcess.Run run = InProcess.finetune("diff", recipes.resolve("lora.yaml").toString(), other.toString());
        assertEquals(0, run.exit(), run.err());
        assertTrue(run.out().contains("  sequence_len: 64 -> 128\n"), run.out());
        assertTrue(run.out().contains("  lr_scheduler: cosine (default) -> linear\n"), run.out());
        assertTrue(run.out().contains("  tokens per optimizer step: up to 128 -> up to 256"), run.out());
        assertFalse(run.out().contains("base:"), "base: is merged away: " + run.out());
    }

    @Test
    void anOverrideAppliesToTheSecondRecipe(@TempDir Path dir) throws IOException {
        Path recipes = ValidateManyTest.repository(dir);
        String lora = recipes.resolve("lora.yaml").toString();
        InProcess.Run run = InProcess.finetune("diff", lora, lora, "lora_r=32", "learning_rate=0.001");
        assertEquals(0, run.exit(), run.err());
        assertTrue(run.out().contains("+++ " + lora + " lora_r=32 learning_rate=0.001"), run.out());
        // 1e-3 in the file and 0.001 on the command line are the same number.
        assertTrue(run.out().contains("recipe: 1 key differ\n  lora_r: 8 -> 32\n"), run.out());
        assertTrue(run.out().contains("batch plan: the same"), run.out());
        InProcess.Run same = InProcess.finetune("diff", lora, lora);
        assertTrue(same.out().contains("recipe: the same after resolving"), same.out());
        InProcess.Run invalid = InProcess.finetune("diff", lora, lora, "lora_r=0");
        assertEquals(2, invalid.exit());
        assertTrue(invalid.err().contains("lora_r"), invalid.err());
    }

    @Test
    void aRankChangeNamesTheTrainableParametersAndTheTermsItMoves() {
        String quickstart = MainProcessTest.repoRoot().resolve("configs/quickstart.yaml").toString();
        InProcess.Run run = InProcess.finetune("diff", quickstart, quickstart, "lora_r=16");
        assertEquals(0, run.exit(), run.err());
        // 2.3 MB of adapter on a 1 MB model: too little for the total in GiB, every figure it moves is named
        assertTrue(run.out().matches("(?s).*\n  trainable parameters: [\\d,]+ -> [\\d,]+\n.*"), run.out());
        assertTrue(run.out().matches("(?s).*\n  adapter: [\\d,]+ B -> [\\d,]+ B\n.*"), run.out());
        assertTrue(run.out().matches("(?s).*\n  optimizer_state: [\\d,]+ B -> [\\d,]+ B\n.*"), run.out());
        assertFalse(run.out().contains("memory plan: the same"), run.out());
    }
}
