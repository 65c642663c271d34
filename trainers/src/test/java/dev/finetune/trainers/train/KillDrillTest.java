package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import com.google.gson.JsonObject;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.output.MetricsLog;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The kill drill with real processes: {@code kill -9} a training run (after a checkpoint, and in the middle of
 * writing one), resume it, and require every later loss, gradient norm, learning rate, epoch and evaluation loss,
 * and the final weights and moments, to equal an uninterrupted run's bit for bit (both on one engine thread).
 */
class KillDrillTest {
    private static final int SEQUENCE_LEN = 8;
    private static final List<String> EXACT = List.of("loss", "grad_norm", "learning_rate", "epoch", "eval_loss");

    record Finished(int exitCode, String stderr) {}

    /** @param more further {@link KillDrillMain} arguments: the model and the objective */
    static Process start(Path outputDir, int sequenceLen, long stepDelayMs, long stallStep, String... more)
            throws IOException {
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        List<String> command = new ArrayList<>(List.of(java.toString(), "-cp", System.getProperty("java.class.path"),
                "-Dai.djl.offline=true", KillDrillMain.class.getName(), outputDir.toString(),
                Integer.toString(sequenceLen), Long.toString(stepDelayMs), Long.toString(stallStep)));
        command.addAll(List.of(more));
        ProcessBuilder builder = new ProcessBuilder(command);
        builder.environment().put("OMP_WAIT_POLICY", "PASSIVE");
        Files.createDirectories(outputDir);
        builder.redirectError(outputDir.resolveSibling(outputDir.getFileName() + ".stderr").toFile());
        return builder.start();
    }

    static Finished runToEnd(Path outputDir, int sequenceLen, String... more) throws Exception {
        Process process = start(outputDir, sequenceLen, 0, -1, more);
        process.getInputStream().transferTo(java.io.OutputStream.nullOutputStream());
        assertTrue(process.waitFor(120, TimeUnit.SECONDS), "training process did not finish");
        String stderr = Files.readString(outputDir.resolveSibling(outputDir.getFileName() + ".stderr"));
        return new Finished(process.exitValue(), stderr);
    }

    /** Reads the child's stdout until a line starting with {@code prefix}, then kills it with SIGKILL. */
    static String killAt(Process process, String prefix) throws Exception {
        BufferedReader lines = new BufferedReader(new InputStreamReader(process.getInputStream(),
                StandardCharsets.UTF_8));
        String line;
        while ((line = lines.readLine()) != null) {
            if (line.startsWith(prefix)) {
                process.destroyForcibly();
                assertTrue(process.waitFor(30, TimeUnit.SECONDS));
                return line;
            }
        }
        throw new AssertionError("the run ended without printing " + prefix);
    }

    private static void assertSameRun(Path expected, Path actual) throws IOException {
        assertSameRun(expected, actual, EXACT);
    }

    /** Every metric in {@code exact} equal line by line, and the last checkpoint's files equal byte for byte. */
    static void assertSameRun(Path expected, Path actual, List<String> exact) throws IOException {
        List<JsonObject> want = MetricsLog.read(expected.resolve(MetricsLog.FILE));
        List<JsonObject> got = MetricsLog.read(actual.resolve(MetricsLog.FILE));
        assertEquals(KillDrillMain.MAX_STEPS + 1, want.size(), "one line per step plus step 0");
        assertEquals(want.size(), got.size(), "steps after a resume must neither repeat nor go missing");
        for (int i = 0; i < want.size(); i++) {
            assertEquals(i, got.get(i).get("step").getAsLong());
            for (String key : exact) {
                assertEquals(want.get(i).get(key), got.get(i).get(key), key + " at step " + i);
            }
        }
        String last = "checkpoint-" + KillDrillMain.MAX_STEPS;
        for (String file : List.of(CheckpointStore.weightsFile(expected.resolve(last)), CheckpointStore.OPTIMIZER)) {
            assertEquals(-1L, Files.mismatch(expected.resolve(last).resolve(file), actual.resolve(last).resolve(file)),
                    file + " after the last step");
        }
        assertEquals(List.of(9L, 12L), new CheckpointStore(actual, 2).complete().stream()
                .map(CheckpointStore.Saved::step).toList(), "save_total_limit keeps the newest two");
    }

    private static List<Path> leftovers(Path outputDir) throws IOException {
        try (Stream<Path> children = Files.list(outputDir)) {
            return children.filter(p -> p.getFileName().toString().startsWith(".tmp-checkpoint-")).toList();
        }
    }

    @Test
    @Timeout(300)
    void killedRunsResumeExactlyAndChangedRecipesAreRefused(@TempDir Path dir) throws Exception {
        Path reference = dir.resolve("uninterrupted");
        assertEquals(0, runToEnd(reference, SEQUENCE_LEN).exitCode());
        List<JsonObject> lines = MetricsLog.read(reference.resolve(MetricsLog.FILE));
        assertTrue(lines.get(0).has("eval_loss") && !lines.get(0).has("loss"), "evaluation before any update");
        assertTrue(lines.get(4).has("eval_loss") && !lines.get(5).has("eval_loss"), "eval_steps: 4");
        assertTrue(Files.size(reference.resolve("loss.png")) > 1000);

        // kill -9 at a random step after the first checkpoint
        int killStep = KillDrillMain.SAVE_STEPS + 1 + new Random().nextInt(KillDrillMain.MAX_STEPS
                - KillDrillMain.SAVE_STEPS - 1);
        Path killed = dir.resolve("killed");
        killAt(start(killed, SEQUENCE_LEN, 150, -1), "STEP " + killStep);
        List<CheckpointStore.Saved> survivors = new CheckpointStore(killed, 2).complete();
        assertFalse(survivors.isEmpty(), "killed after step " + killStep + " with no checkpoint");
        long resumedFrom = survivors.get(survivors.size() - 1).step();
        assertEquals(0, runToEnd(killed, SEQUENCE_LEN).exitCode());
        assertSameRun(reference, killed);
        assertTrue(resumedFrom < KillDrillMain.MAX_STEPS, "killed at step " + killStep);

        // kill -9 while checkpoint-6 is written but not yet published
        Path stalled = dir.resolve("stalled");
        killAt(start(stalled, SEQUENCE_LEN, 0, 6), "STALLED");
        assertFalse(Files.exists(stalled.resolve("checkpoint-6")));
        assertEquals(1, leftovers(stalled).size());
        List<CheckpointStore.Saved> previous = new CheckpointStore(stalled, 2).complete();
        assertEquals(3L, previous.get(previous.size() - 1).step());
        try (NDManager manager = NDManager.newBaseManager()) {
            CheckpointStore.Loaded loaded = CheckpointStore.load(previous.get(previous.size() - 1).folder(), manager);
            assertEquals(3L, loaded.state().globalStep());
            assertEquals(3L * KillDrillMain.ACCUMULATION, loaded.state().microBatchesConsumed());
            assertFalse(loaded.weights().isEmpty());
        }
        assertEquals(0, runToEnd(stalled, SEQUENCE_LEN).exitCode());
        assertEquals(List.of(), leftovers(stalled));
        assertSameRun(reference, stalled);

        // a resume with a changed resume-invariant recipe value is refused, naming the change
        Finished refused = runToEnd(reference, SEQUENCE_LEN + 4);
        assertEquals(2, refused.exitCode(), refused.stderr());
        assertTrue(refused.stderr().contains("sequence_len: 8 → 12"), refused.stderr());
    }
}
