package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import java.io.BufferedReader;
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
 * Twenty {@code kill -9}s of one run at random steps (a quarter of them with a checkpoint written and not yet
 * published, the rest at a random moment after a step, which often falls inside the checkpoint write that
 * follows it), each followed by a resume; then the run must equal an uninterrupted one bit for bit, and a
 * damaged newest checkpoint must make the resume fall back to the one before it.
 */
class KillDrillRepeatedTest {
    private static final int SEQUENCE_LEN = 8;
    private static final int KILLS = 20;

    @Test
    @Timeout(600)
    void twentyKillsAtRandomStepsResumeBitForBit(@TempDir Path dir) throws Exception {
        Path reference = dir.resolve("uninterrupted");
        assertEquals(0, KillDrillTest.runToEnd(reference, SEQUENCE_LEN).exitCode());

        Path drill = dir.resolve("drill");
        Random random = new Random();
        List<String> log = new ArrayList<>();
        int kills = 0;
        while (kills < KILLS) {
            long resumeStep = newest(drill);
            if (resumeStep >= KillDrillMain.MAX_STEPS) {
                // the run got to its end between kills: start it over so every kill lands in a live run
                deleteTree(drill);
                resumeStep = 0;
            }
            boolean stall = kills % 4 == 3;
            long saveAhead = (resumeStep / KillDrillMain.SAVE_STEPS + 1) * KillDrillMain.SAVE_STEPS;
            long target = resumeStep + 1 + random.nextInt((int) (KillDrillMain.MAX_STEPS - resumeStep));
            Process process = KillDrillTest.start(drill, SEQUENCE_LEN, 0, stall ? saveAhead : -1);
            String prefix = stall ? "STALLED" : "STEP " + target;
            boolean killed = killAfter(process, prefix, stall ? 0 : random.nextInt(40));
            if (killed) {
                kills++;
                log.add((stall ? "inside checkpoint-" + saveAhead : "after step " + target) + " (resumed from "
                        + resumeStep + ")");
            }
        }
        assertEquals(0, KillDrillTest.runToEnd(drill, SEQUENCE_LEN).exitCode(), String.join("; ", log));
        KillDrillTest.assertSameRun(reference, drill, List.of("loss", "grad_norm", "learning_rate", "epoch",
                "eval_loss"));
        try (Stream<Path> children = Files.list(drill)) {
            assertEquals(List.of(), children.map(p -> p.getFileName().toString())
                    .filter(n -> n.startsWith(".tmp-") || n.startsWith(".old-")).toList(), "temporaries left");
        }
        System.out.println("kill drill: " + kills + " kills: " + String.join("; ", log));

        // a damaged newest checkpoint: the resume falls back to the previous one and still ends bit for bit
        Path damaged = dir.resolve("damaged");
        KillDrillTest.killAt(KillDrillTest.start(damaged, SEQUENCE_LEN, 150, -1), "STEP 8");
        List<CheckpointStore.Saved> saved = new CheckpointStore(damaged, 2).complete();
        assertEquals(List.of(3L, 6L), saved.stream().map(CheckpointStore.Saved::step).toList());
        Path weights = saved.get(1).folder().resolve(CheckpointStore.weightsFile(saved.get(1).folder()));
        byte[] bytes = Files.readAllBytes(weights);
        bytes[bytes.length - 3] ^= 0x5a;
        Files.write(weights, bytes);
        KillDrillTest.Finished resumed = KillDrillTest.runToEnd(damaged, SEQUENCE_LEN);
        assertEquals(0, resumed.exitCode(), resumed.stderr());
        // had the damaged weights been loaded, the losses after step 6 would differ from the reference's
        KillDrillTest.assertSameRun(reference, damaged, List.of("loss", "grad_norm", "learning_rate", "epoch",
                "eval_loss"));
    }

    /** Kills after {@code prefix} appears on stdout and {@code delayMs} more; false when the run ended first. */
    private static boolean killAfter(Process process, String prefix, long delayMs) throws Exception {
        BufferedReader lines = new BufferedReader(new InputStreamReader(process.getInputStream(),
                StandardCharsets.UTF_8));
        String line;
        while ((line = lines.readLine()) != null) {
            if (line.startsWith(prefix)) {
                Thread.sleep(delayMs);
                process.destroyForcibly();
                assertTrue(process.waitFor(30, TimeUnit.SECONDS));
                return true;
            }
        }
        assertTrue(process.waitFor(30, TimeUnit.SECONDS));
        return false;
    }

    private static long newest(Path outputDir) {
        List<CheckpointStore.Saved> complete = new CheckpointStore(outputDir, 2).complete();
        return complete.isEmpty() ? 0 : complete.get(complete.size() - 1).step();
    }

    private static void deleteTree(Path root) throws Exception {
        try (Stream<Path> walk = Files.walk(root)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.delete(p);
            }
        }
    }
}
