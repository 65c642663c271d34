package dev.finetune.trainers.train.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.UserError;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class CheckpointStoreTest {

    private static TrainerState state(long step, Map<String, String> keys) {
        return new TrainerState(step, step / 4.0, step * 2, 8, 7, "cosine", 100, 10, 3e-4, 2.5e-4, keys,
                ResumeKeys.hash(keys));
    }

    @Test
    void saveThenLoadRestoresEveryBitAndTheState(@TempDir Path dir) {
        CheckpointStore store = new CheckpointStore(dir, 0);
        try (NDManager manager = NDManager.newBaseManager()) {
            // values that a decimal round trip would damage: subnormals, NaN payloads aside, odd fractions
            float[] odd = {Float.MIN_VALUE, 1f / 3f, -0f, 123456.789f, Float.MAX_VALUE, (float) Math.PI};
            NDArray weight = manager.create(odd, new Shape(2, 3));
            NDArray moment = manager.create(new float[] {1e-30f, 7f});
            TrainerState saved = state(5, Map.of("sequence_len", "64"));
            Path folder = store.save(List.of(new NamedArray("layer.weight", weight)),
                    List.of(new NamedArray("exp_avg.layer.weight", moment)), saved, "{}", extra -> {}, temporary -> {});
            assertEquals(dir.resolve("checkpoint-5"), folder);
            CheckpointStore.Loaded loaded = CheckpointStore.load(folder, manager);
            assertArrayEquals(weight.toByteArray(), loaded.weights().get("layer.weight").toByteArray());
            assertEquals(new Shape(2, 3), loaded.weights().get("layer.weight").getShape());
            assertArrayEquals(moment.toByteArray(), loaded.optimizer().get("exp_avg.layer.weight").toByteArray());
            assertEquals(saved, loaded.state());
        }
    }

    /**
     * #26: a checkpoint without its manifest is refused, naming the file, never used unchecked; the command the hint
     * gives (the user's explicit acceptance) writes a manifest that then verifies, and a changed file still fails.
     */
    @Test
    void aCheckpointWithoutChecksumsIsRefusedUntilTheHintsCommandAcceptsIt(@TempDir Path dir) throws Exception {
        CheckpointStore store = new CheckpointStore(dir, 0);
        Path folder;
        try (NDManager manager = NDManager.newBaseManager()) {
            folder = store.save(List.of(new NamedArray("layer.weight", manager.create(new float[] {1f, 2f}))),
                    List.of(), state(3, Map.of()), "{}", extra -> {}, temporary -> {});
        }
        Files.delete(folder.resolve(CheckpointStore.CHECKSUMS));
        Checksums.Unverified refused = assertThrows(Checksums.Unverified.class, () -> CheckpointStore.verify(folder));
        assertEquals(folder.resolve(CheckpointStore.CHECKSUMS).toString(), refused.where());
        assertTrue(refused.getMessage().startsWith("checkpoint-3 has no checksums.sha256"), refused.getMessage());
        String command = refused.hint().substring(refused.hint().indexOf("cd "), refused.hint().indexOf("; else"));
        Process p = new ProcessBuilder("bash", "-c", command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertEquals(0, p.waitFor(), out);
        assertEquals(3, CheckpointStore.verify(folder).globalStep());
        Files.writeString(folder.resolve(CheckpointStore.STATE), "{}");
        assertThrows(CheckpointStore.Damaged.class, () -> CheckpointStore.verify(folder));
    }

    @Test
    void oldCheckpointsGoOnlyAfterTheNewOneIsCompleteAndLeftoversAreCleaned(@TempDir Path dir) throws Exception {
        CheckpointStore store = new CheckpointStore(dir, 2);
        try (NDManager manager = NDManager.newBaseManager()) {
            List<NamedArray> weights = List.of(new NamedArray("w", manager.ones(new Shape(2))));
            for (long step : new long[] {2, 4}) {
                store.save(weights, List.of(), state(step, Map.of()), "{}", extra -> {}, temporary -> {});
            }
            store.save(weights, List.of(), state(6, Map.of()), "{}", extra -> {}, temporary -> {
                // while the third is unpublished, both earlier ones must still be there
                assertEquals(List.of(2L, 4L), store.complete().stream().map(CheckpointStore.Saved::step).toList());
            });
            assertEquals(List.of(4L, 6L), store.complete().stream().map(CheckpointStore.Saved::step).toList());
        }
        Files.createDirectories(dir.resolve(".tmp-checkpoint-8-999"));
        Files.createDirectories(dir.resolve("checkpoint-10")); // no finetune_state.json: not complete
        assertEquals(List.of(4L, 6L), store.complete().stream().map(CheckpointStore.Saved::step).toList());
        store.removeLeftovers();
        assertTrue(Files.notExists(dir.resolve(".tmp-checkpoint-8-999")));
        UserError incomplete = assertThrows(UserError.class,
                () -> store.resolve("resume_from_checkpoint", Path.of("checkpoint-10")));
        assertTrue(incomplete.oneLine().contains("not a complete checkpoint"), incomplete.oneLine());
    }

    @Test
    void aChangedRecipeIsRefusedNamingEveryChange() {
        TrainerState saved = state(3, Map.of("base_model", "a", "lora_r", "8", "sequence_len", "64"));
        ResumeKeys.requireUnchanged(saved, Map.of("base_model", "a", "lora_r", "8", "sequence_len", "64"), "c");
        UserError refused = assertThrows(UserError.class, () -> ResumeKeys.requireUnchanged(saved,
                Map.of("base_model", "a", "lora_r", "16", "datasets", "x.jsonl"), "checkpoint-3"));
        assertEquals("resume_from_checkpoint", refused.where());
        String message = refused.getMessage();
        assertTrue(message.contains("lora_r: 8 → 16"), message);
        assertTrue(message.contains("sequence_len: 64 → (unset)"), message);
        assertTrue(message.contains("datasets: (unset) → x.jsonl"), message);
    }
}
