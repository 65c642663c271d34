package dev.finetune.trainers.backend;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.sft.SftBatch;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code eval_sample_packing} and {@code eval_sequence_len}: how evaluation rows are packed and cut. */
class EvalDataKeysTest {
    static final Path STORIES = Path.of("..", "configs", "models", "stories260K").toAbsolutePath().normalize();

    static TrainingData<SftBatch> data(Path dir, String keys) throws IOException {
        List<String> rows = IntStream.range(0, 12).mapToObj(i -> "{\"text\": \"Story " + i + " is here.\"}").toList();
        Files.write(dir.resolve("train.jsonl"), rows);
        Files.write(dir.resolve("test.jsonl"), List.of("{\"text\": \"A short one.\"}", "{\"text\": \"Another.\"}",
                "{\"text\": \"" + "Once upon a time there was a girl who liked the sun. ".repeat(3) + "\"}"));
        Files.writeString(dir.resolve("r.yaml"), "base_model: " + STORIES + "\nlearning_rate: 1e-3\nmicro_batch_size: 4\n"
                + "gradient_accumulation_steps: 1\nsequence_len: 128\nsample_packing: true\n"
                + "excess_length_strategy: drop\ndatasets: [{path: train.jsonl, type: completion}]\n"
                + "test_datasets: [{path: test.jsonl, type: completion}]\n" + keys);
        Recipe recipe = ValidatedRecipe.load(dir.resolve("r.yaml"), List.of()).recipe();
        try (Tokenizer tokenizer = Tokenizer.load(STORIES)) {
            return TrainingData.sft(recipe, 4, tokenizer);
        }
    }

    /** Examples per row of each evaluation batch. */
    static List<Long> examplesPerRow(List<SftBatch> batches) {
        return batches.stream().flatMap(b -> {
            long[] segments = b.segmentIds();
            int columns = b.columns();
            return IntStream.range(0, b.rows()).mapToObj(r -> Arrays.stream(segments, r * columns, (r + 1) * columns)
                    .max().orElse(0));
        }).toList();
    }

    @Test
    void evalSamplePackingFalseEvaluatesOneExamplePerRow(@TempDir Path dir) throws IOException {
        List<Long> packed = examplesPerRow(data(dir, "").eval());
        assertEquals(List.of(3L), packed, "eval packed as training is (eval_sample_packing follows sample_packing)");
        List<Long> unpacked = examplesPerRow(data(dir, "eval_sample_packing: false\n").eval());
        assertEquals(List.of(1L, 1L, 1L), unpacked);
    }

    @Test
    void evalSequenceLenCutsTheTestDatasets(@TempDir Path dir) throws IOException {
        List<SftBatch> whole = data(dir, "eval_sample_packing: false\n").eval();
        assertEquals(3, examplesPerRow(whole).size());
        assertTrue(whole.stream().anyMatch(b -> b.columns() > 16));
        // completion text longer than the limit is cut into pieces of eval_sequence_len tokens, as training's is
        List<SftBatch> cut = data(dir, "eval_sample_packing: false\neval_sequence_len: 16\n").eval();
        assertTrue(examplesPerRow(cut).size() > 3, "the long test row (about 40 tokens) is cut: " + examplesPerRow(cut));
        assertTrue(cut.stream().allMatch(b -> b.columns() <= 16), "no evaluation row longer than eval_sequence_len");
        assertTrue(data(dir, "eval_sequence_len: 16\n").train().size() > 0, "training rows stay at sequence_len");
    }
}
