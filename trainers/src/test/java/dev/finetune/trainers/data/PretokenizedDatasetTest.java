package dev.finetune.trainers.data;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.InvalidRecipe;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.text.Tokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A dataset without {@code type:} holds Axolotl's pre-tokenized rows: validate accepts it and the trainer reads it. */
class PretokenizedDatasetTest {

    @Test
    void rowsOfTokenIdsNeedNoType(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("ids.jsonl"), "{\"input_ids\": [1, 403, 407, 2], \"labels\": [-100, -100, 407, 2]}\n");
        String recipe = "base_model: " + DataPipelineTest.STORIES.toAbsolutePath().normalize() + "\nlearning_rate: 1e-3\n"
                + "micro_batch_size: 1\ngradient_accumulation_steps: 1\ndatasets:\n  - path: ids.jsonl\n";
        Files.writeString(dir.resolve("r.yaml"), recipe);
        Recipe r = ValidatedRecipe.load(dir.resolve("r.yaml"), List.of()).recipe();
        try (Tokenizer tokenizer = Tokenizer.load(DataPipelineTest.STORIES)) {
            Example example = DataPipeline.prepare(r.data().datasets(), DataOptions.of(r), tokenizer).train().get(0);
            assertArrayEquals(new int[] {1, 403, 407, 2}, example.inputIds());
            assertArrayEquals(new int[] {-100, -100, 407, 2}, example.labels());
        }
        Files.writeString(dir.resolve("dpo.yaml"), recipe + "rl: dpo\n");
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(dir.resolve("dpo.yaml"), List.of()));
        assertTrue(e.getMessage().contains("rows need one") || e.errors().toString().contains("rows need one"), e.errors().toString());
    }
}
