package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Saving at scale (#21), on 2 real CPU ranks under torchrun: a full fine-tune of stories260K saved every 2 steps.
 * <ul>
 *   <li>Killed during a save (rank 1 gets SIGKILL after writing its DCP shards and its rows of the weights, before the
 *       folder is complete): the previous checkpoint stays intact (its checksums verify), the half-written one is
 *       never named {@code checkpoint-N}, and {@code resume_from_checkpoint: true} continues from the previous one
 *       with the uninterrupted run's losses.</li>
 *   <li>Every checkpoint's {@code checksums.sha256} covers each rank's DCP shard file and the weights, hashed by the
 *       ranks that wrote them.</li>
 *   <li>{@code fsdp_config.state_dict_type: SHARDED_STATE_DICT}: checkpoints without the Hugging Face weights (the
 *       final folder has them); {@code save_only_model: true}: checkpoints without DCP state, which a resume refuses
 *       (exit 2) instead of failing in a rank.</li>
 * </ul>
 */
class FsdpSaveTest {

    private static ValidatedRecipe recipe(Path dir, String name, String extra, String... overrides)
            throws IOException {
        StoriesRecipe recipe = StoriesRecipe.sft().set("max_steps", 6).set("save_steps", 2).set("eval_steps", 6)
                .set("learning_rate", "1e-3").set("save_total_limit", 5);
        String yaml = recipe.yaml(dir.resolve(name)) + extra;
        return FsdpRuns.recipe(dir, name, yaml, overrides);
    }

    @Test
    void aRunKilledDuringASaveResumesFromTheLastCompleteCheckpoint(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        ValidatedRecipe whole = recipe(tmp, "whole", "fsdp_version: 2\nfsdp_config:\n  state_dict_type: "
                + "SHARDED_STATE_DICT\n");
        ValidatedRecipe killed = recipe(tmp, "killed", "");
        ValidatedRecipe modelOnly = recipe(tmp, "model-only", "save_only_model: true\n");
        ByteArrayOutputStream killedLog = new ByteArrayOutputStream();
        CompletableFuture<FsdpBackend.Result> wholeRun = FsdpRuns.start(() -> FsdpRuns.fsdp(whole, 2));
        CompletableFuture<FsdpBackend.WorkerFailed> killedRun = FsdpRuns.start(() -> assertThrows(
                FsdpBackend.WorkerFailed.class, () -> FsdpRuns.fsdp(killed, 2,
                        Map.of("FINETUNE_WORKER_KILL_IN_SAVE", "1:4"), killedLog)));
        CompletableFuture<FsdpBackend.Result> modelOnlyRun = FsdpRuns.start(() -> FsdpRuns.fsdp(modelOnly, 2));
        FsdpRuns.joinAll(wholeRun, killedRun, modelOnlyRun);

        Path killedDir = tmp.resolve("killed");
        System.out.println("killed during the save of step 4: " + killedRun.join().getMessage());
        assertTrue(killedRun.join().getMessage().contains("rank 1"), killedRun.join().getMessage());
        assertFalse(Files.exists(killedDir.resolve("checkpoint-4")), "the interrupted save is not a checkpoint");
        assertTrue(Files.isDirectory(killedDir.resolve(".tmp-checkpoint-4")), "it stopped halfway through the save");
        Path previous = killedDir.resolve("checkpoint-2");
        WorkerCheckpoints.verify(previous); // intact: every file has the SHA-256 its rank recorded
        List<String> manifest = Files.readAllLines(previous.resolve(WorkerCheckpoints.CHECKSUMS));
        for (String file : List.of("dcp/__0_0.distcp", "dcp/__1_0.distcp", "model.safetensors", "config.json")) {
            assertTrue(manifest.stream().anyMatch(l -> l.endsWith("  " + file)), file + " in " + manifest);
        }

        ValidatedRecipe resumed = recipe(tmp, "killed", "", "resume_from_checkpoint=true");
        ByteArrayOutputStream resumeLog = new ByteArrayOutputStream();
        CompletableFuture<FsdpBackend.Result> resumedRun = FsdpRuns.start(() -> FsdpRuns.fsdp(resumed, 2, Map.of(),
                resumeLog));
        ValidatedRecipe fromModelOnly = recipe(tmp, "model-only", "save_only_model: true\n",
                "resume_from_checkpoint=true");
        CompletableFuture<UserError> refused = FsdpRuns.start(() -> assertThrows(UserError.class,
                () -> FsdpRuns.fsdp(fromModelOnly, 2, Map.of(), new ByteArrayOutputStream())));
        FsdpRuns.joinAll(resumedRun, refused);

        String resumedText = resumeLog.toString(StandardCharsets.UTF_8);
        assertTrue(resumedText.contains("at step 2 (saved by 2 rank(s))"), resumedText);
        assertFalse(Files.exists(killedDir.resolve(".tmp-checkpoint-4")), "the next start removes the leftover");
        double delta = FsdpRuns.maxDelta(FsdpRuns.series(tmp.resolve("whole"), "loss"),
                FsdpRuns.series(killedDir, "loss"), 1);
        System.out.printf(Locale.ROOT, "killed in the save of step 4, resumed from step 2: max |d loss| vs the "
                + "uninterrupted run %.2e%n", delta);
        assertTrue(delta <= 1e-6, "the resumed run drifted by " + delta);
        for (int step : List.of(4, 6)) {
            WorkerCheckpoints.verify(killedDir.resolve("checkpoint-" + step));
        }

        Path wholeDir = tmp.resolve("whole");
        assertFalse(Files.exists(wholeDir.resolve("checkpoint-4/model.safetensors")), "SHARDED_STATE_DICT: DCP only");
        assertTrue(Files.isRegularFile(wholeDir.resolve("checkpoint-4/dcp/.metadata")));
        assertTrue(Files.isRegularFile(wholeDir.resolve("model.safetensors")), "the final weights, HF layout");

        Path modelOnlyDir = tmp.resolve("model-only");
        assertFalse(Files.exists(modelOnlyDir.resolve("checkpoint-4/dcp")), "save_only_model: no optimizer state");
        assertTrue(Files.isRegularFile(modelOnlyDir.resolve("checkpoint-4/model.safetensors")));
        WorkerCheckpoints.verifyFiles(modelOnlyDir.resolve("checkpoint-4"));
        assertTrue(refused.join().getMessage().contains("save_only_model"), refused.join().getMessage());
        assertEquals("resume_from_checkpoint", refused.join().where(), refused.join().getMessage());
    }
}
