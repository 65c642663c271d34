package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.trainers.backend.OutputFolder;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The fsdp backend owns its output_dir as the single-device run does ({@link OutputFolder}), checked with real
 * processes: a live run's folder is refused to a second run, a {@code kill -9} of the launcher takes its ranks with
 * it and releases the folder, a finished run's folder is not overwritten unasked, inputs and foreign folders are
 * refused before anything is written, and {@code finetune preprocess}'s cache does not make a folder foreign.
 */
class FsdpOutputFolderTest {

    private static Path recipe(Path dir) throws Exception {
        Path root = MainProcessTest.repoRoot();
        Files.copy(root.resolve("configs/data/quickstart.jsonl"), dir.resolve("stories.jsonl"));
        Path recipe = dir.resolve("recipe.yaml");
        Files.writeString(recipe, """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                val_set_size: 0.05
                output_dir: %s
                adapter: lora
                lora_r: 4
                lora_alpha: 8
                lora_target_modules: [q_proj, v_proj]
                sequence_len: 128
                sample_packing: true
                micro_batch_size: 2
                gradient_accumulation_steps: 1
                max_steps: 100000
                learning_rate: 1e-3
                save_steps: 50000
                eval_steps: 50000
                seed: 3
                hardware: cpu
                backend: fsdp
                """.formatted(root.resolve("configs/models/stories260K"), dir.resolve("stories.jsonl"),
                dir.resolve("out")));
        return recipe;
    }

    private static List<String> command(String... args) {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java")
                .toString(), "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dai.djl.offline=true",
                "-Dfinetune.home=" + MainProcessTest.repoRoot(), "-cp", System.getProperty("java.class.path"),
                Main.class.getName()));
        command.addAll(List.of(args));
        return command;
    }

    private static String[] fsdp(Path recipe, String... overrides) {
        List<String> args = new ArrayList<>(List.of(recipe.toString()));
        args.addAll(List.of(overrides));
        args.addAll(List.of("--nproc-per-node", "2", "--python", PythonStack.python().toString()));
        return args.toArray(String[]::new);
    }

    @Test
    @Timeout(900)
    void theFsdpBackendOwnsItsOutputFolderAsTheSingleDeviceRunDoes(@TempDir Path dir) throws Exception {
        Path recipe = recipe(dir);
        Path out = dir.resolve("out");

        // preprocess first (as the sbatch script does): its cache alone does not make the folder foreign
        PeftParityTest.Run prepared = PeftParityTest.finetune("preprocess", recipe.toString());
        assertEquals(0, prepared.exit(), prepared.err());
        assertTrue(Files.isDirectory(out.resolve(OutputFolder.PREPARED)));

        // a long run: live once both ranks said they started
        ProcessBuilder builder = new ProcessBuilder(command(fsdp(recipe))).redirectErrorStream(true);
        builder.environment().put("OMP_WAIT_POLICY", "PASSIVE");
        Process first = builder.start();
        List<Long> ranks = new ArrayList<>();
        StringBuilder firstOut = new StringBuilder();
        BufferedReader lines = new BufferedReader(new InputStreamReader(first.getInputStream(), StandardCharsets.UTF_8));
        for (String line; ranks.size() < 2 && (line = lines.readLine()) != null; ) {
            firstOut.append(line).append('\n');
            if (line.contains("] started, pid ")) {
                ranks.add(Long.parseLong(line.substring(line.lastIndexOf(' ') + 1).strip()));
            }
        }
        assertEquals(2, ranks.size(), "both ranks start:\n" + firstOut);
        Thread drain = new Thread(() -> lines.lines().forEach(l -> { }));
        drain.start();
        assertTrue(Files.isRegularFile(out.resolve(OutputFolder.MARKER)), "the run claimed its folder");

        try {
            // a second run into the live run's folder is refused, even one that asks to overwrite it
            PeftParityTest.Run second = PeftParityTest.finetune(fsdp(recipe, "max_steps=2",
                    "overwrite_output_dir=true"));
            assertEquals(2, second.exit(), second.out() + second.err());
            assertTrue(second.err().contains("another finetune run (pid " + first.pid() + ") is writing to this "
                    + "output_dir"), second.err());
            assertFalse(second.err().contains("\tat "), second.err());
        } finally {
            // kill -9 of the launcher: its ranks follow it (they watch its pid), and the kernel drops the lock
            first.destroyForcibly();
            first.waitFor();
        }
        for (long pid : ranks) {
            ProcessHandle.of(pid).ifPresent(h -> {
                try {
                    h.onExit().get(120, TimeUnit.SECONDS);
                } catch (Exception e) {
                    h.destroyForcibly();
                    throw new AssertionError("rank pid " + pid + " outlived its killed launcher");
                }
            });
        }
        drain.join();

        // Two refusals that do not touch out/ run beside the takeover below: an output_dir that holds an input (even
        // with overwrite_output_dir), and a folder of someone else's files; neither may write anything.
        CompletableFuture<PeftParityTest.Run> input = Overlap.start(() -> PeftParityTest.finetune(fsdp(recipe,
                "max_steps=2", "output_dir=" + dir, "overwrite_output_dir=true")));
        Path foreign = Files.createDirectories(dir.resolve("theirs"));
        Files.writeString(foreign.resolve("notes.txt"), "mine");
        CompletableFuture<PeftParityTest.Run> refused = Overlap.start(() -> PeftParityTest.finetune(fsdp(recipe,
                "max_steps=2", "output_dir=" + foreign)));

        // the folder is free again: this recipe's stopped run had saved nothing, so a new one may take it over
        CompletableFuture<PeftParityTest.Run> takeover = Overlap.start(() -> PeftParityTest.finetune(fsdp(recipe,
                "max_steps=2", "save_steps=2")));
        Overlap.joinAll(input, refused, takeover);
        PeftParityTest.Run again = takeover.join();
        assertEquals(0, again.exit(), again.out() + again.err());
        assertTrue(again.out().contains("reused"), "the preprocess cache survives the takeover:\n" + again.out());
        assertTrue(Files.isRegularFile(out.resolve("adapter_model.safetensors")));

        // now it holds a finished run: neither mixed with nor deleted unasked
        PeftParityTest.Run finished = PeftParityTest.finetune(fsdp(recipe, "max_steps=2"));
        assertEquals(2, finished.exit(), finished.err());
        assertTrue(finished.err().contains("output_dir already holds an earlier run (1 checkpoint)"), finished.err());
        assertTrue(finished.err().contains("resume_from_checkpoint=true"), finished.err());

        PeftParityTest.Run holdsInput = input.join();
        assertEquals(2, holdsInput.exit(), holdsInput.err());
        assertTrue(holdsInput.err().contains("output_dir holds the run's input"), holdsInput.err());
        assertFalse(Files.exists(dir.resolve(OutputFolder.MARKER)));
        assertFalse(Files.exists(dir.resolve("worker")));

        PeftParityTest.Run theirs = refused.join();
        assertEquals(2, theirs.exit(), theirs.err());
        assertTrue(theirs.err().contains("output_dir is not empty and was not written by finetune"), theirs.err());
        try (var entries = Files.list(foreign)) {
            assertEquals(List.of(foreign.resolve("notes.txt")), entries.toList());
        }
    }
}
