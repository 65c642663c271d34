package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Preprocessing once and splitting each global batch over the ranks. */
class FsdpDataTest {

    private static String recipe(Path data, Path out) {
        return """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                val_set_size: 0
                output_dir: %s
                adapter: lora
                lora_r: 4
                lora_alpha: 8
                lora_target_modules: [q_proj, v_proj]
                sequence_len: 64
                sample_packing: false
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                max_steps: 4
                learning_rate: 1e-3
                save_strategy: 'no'
                seed: 3
                hardware: cpu
                """.formatted(WorkerEnvironment.stories260K(), data, out);
    }

    private static Path tenStories(Path dir, String last) throws IOException {
        Path data = dir.resolve("ten.jsonl");
        List<String> rows = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            rows.add("{\"text\": \"Once upon a time story " + (i == 9 ? last : Integer.toString(i))
                    + " had a little dog.\"}");
        }
        Files.write(data, rows);
        return data;
    }

    private static Preprocess.Prepared preprocess(ValidatedRecipe recipe) {
        return Preprocess.run(recipe, FsdpRuns.writer(new ByteArrayOutputStream()));
    }

    @Test
    void theSecondPreprocessReusesTheFileUntilTheDataChanges(@TempDir Path tmp) throws IOException {
        Path data = tenStories(tmp, "nine");
        ValidatedRecipe recipe = FsdpRuns.recipe(tmp, "r", recipe(data, tmp.resolve("out")));
        Preprocess.Prepared first = preprocess(recipe);
        assertFalse(first.reused());
        assertEquals(10, first.trainBatches());
        assertEquals(10, first.rows());
        assertTrue(first.tokens() > first.targets() && first.targets() > 0);
        Preprocess.Prepared second = preprocess(recipe);
        assertTrue(second.reused());
        assertEquals(first.file(), second.file());
        assertEquals(first.tokens(), second.tokens());

        tenStories(tmp, "ten");
        Preprocess.Prepared changed = preprocess(FsdpRuns.recipe(tmp, "r", recipe(data, tmp.resolve("out"))));
        assertFalse(changed.reused());
        assertNotEquals(first.key(), changed.key());
        Preprocess.Prepared longer = preprocess(FsdpRuns.recipe(tmp, "r", recipe(data, tmp.resolve("out")),
                "sequence_len=128"));
        assertNotEquals(changed.key(), longer.key());
    }

    @Test
    void threeRanksTrainDisjointMicroBatchesThatCoverEveryExample(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        Path out = tmp.resolve("out");
        ValidatedRecipe recipe = FsdpRuns.recipe(tmp, "r", recipe(tenStories(tmp, "nine"), out));
        FsdpRuns.fsdp(recipe, 3);
        // step -> rank -> micro batches (one each: micro 1 x accumulation 1 per rank)
        TreeMap<Integer, TreeMap<Integer, List<Integer>>> steps = new TreeMap<>();
        for (int rank = 0; rank < 3; rank++) {
            for (String line : Files.readAllLines(out.resolve("worker/logs/data-rank" + rank + ".jsonl"))) {
                JsonObject json = JsonParser.parseString(line).getAsJsonObject();
                List<Integer> batches = new ArrayList<>();
                json.getAsJsonArray("micro_batches").forEach(b -> batches.add(b.getAsInt()));
                steps.computeIfAbsent(json.get("step").getAsInt(), s -> new TreeMap<>()).put(rank, batches);
            }
        }
        assertEquals(4, steps.size());
        List<Integer> epoch = new ArrayList<>();
        for (var step : steps.entrySet()) {
            Set<Integer> seen = new HashSet<>();
            assertEquals(3, step.getValue().size(), "every rank trains at step " + step.getKey());
            for (var rank : step.getValue().entrySet()) {
                assertEquals(1, rank.getValue().size());
                assertTrue(seen.addAll(rank.getValue()), "ranks overlap at step " + step.getKey());
                epoch.addAll(rank.getValue());
            }
        }
        // data positions 0..9 (rank r of step s holds position 3(s-1) + r) are the first epoch: all ten examples
        assertEquals(Set.of(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), new HashSet<>(epoch.subList(0, 10)));
        assertEquals(10, new HashSet<>(epoch.subList(0, 10)).size());
    }
}
