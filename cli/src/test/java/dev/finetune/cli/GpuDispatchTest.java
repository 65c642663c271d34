package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Which trainer runs a recipe on which device (#22): the JVM trainer computes on the CPU only, so a recipe that declares
 * a GPU, one included, goes to the torch worker (one process at world size 1, no torchrun), and the CPU stays in this
 * JVM. Decided by the resolved run, shown by {@code plan}, {@code validate} and {@code --dry-run}, and a declared GPU
 * the worker's torch cannot see is refused before anything is written.
 */
class GpuDispatchTest {

    private static Path configs() {
        return MainProcessTest.repoRoot().resolve("configs");
    }

    /** The dispatch table of the shipped recipes, as it stands in the report of #22. */
    @Test
    void theShippedConfigsGoToTheTrainerOfTheirDevice() throws IOException {
        Map<String, String> expected = Map.of(
                "quickstart.yaml", "single-device trainer (this JVM) on CPU, 1 rank",
                "quickstart-dpo.yaml", "single-device trainer (this JVM) on CPU, 1 rank",
                "quickstart-grpo.yaml", "single-device trainer (this JVM) on CPU, 1 rank",
                "trl-grpo.yaml", "single-device trainer (this JVM) on CPU, 1 rank",
                "llama-3.1-8b/qlora-sft.yaml", "torch worker (one process, no torchrun) on CUDA, 1 rank",
                "qwen2.5-1.5b/lora-grpo.yaml", "torch worker (one process, no torchrun) on CUDA, 1 rank",
                "qwen2.5-7b/lora-dpo.yaml", "torch worker (one process, no torchrun) on CUDA, 1 rank",
                "llama-3.1-70b/full-fsdp.yaml", "fsdp worker (torchrun) on CUDA, 8 ranks");
        Map<String, String> table = new TreeMap<>();
        try (Stream<Path> files = Files.walk(configs())) {
            for (Path file : files.filter(f -> f.toString().endsWith(".yaml")).toList()) {
                ValidatedRecipe v = ValidatedRecipe.load(file, List.of(), LaunchShape.RECIPE);
                String line = v.run().describe().strip();
                table.put(configs().relativize(file).toString(), line.substring("run: ".length()));
            }
        }
        table.forEach((config, run) -> System.out.printf("dispatch  %-30s %s%n", config, run));
        assertEquals(new TreeMap<>(expected), table);
    }

    /** The new user: the quickstart on one H100 is the worker's on CUDA, and {@code --dry-run} says so. */
    @Test
    void dryRunSaysWhichTrainerAndDeviceRun() {
        String quickstart = configs().resolve("quickstart.yaml").toString();
        InProcess.Run gpu = InProcess.finetune(quickstart, "hardware={gpus: 1, gpu_type: H100}", "backend=auto",
                "--dry-run", "--python", "/opt/py/bin/python");
        assertEquals(0, gpu.exit(), gpu.out() + gpu.err());
        assertTrue(gpu.out().contains("run: torch worker (one process, no torchrun) on CUDA, 1 rank\n"), gpu.out());
        assertTrue(gpu.out().contains("\ncommand: /opt/py/bin/python -I -u "), gpu.out());
        assertFalse(gpu.out().contains("torch.distributed.run"), "one process needs no torchrun: " + gpu.out());
        assertTrue(gpu.out().contains("world size: 1 (1 node x 1 process per node)"), gpu.out());

        for (String config : List.of("qwen2.5-7b/lora-dpo.yaml", "llama-3.1-8b/qlora-sft.yaml")) {
            InProcess.Run shipped = InProcess.finetune(configs().resolve(config).toString(), "--dry-run", "--python",
                    "/opt/py/bin/python");
            assertEquals(0, shipped.exit(), config + ": " + shipped.out() + shipped.err());
            assertTrue(shipped.out().contains("run: torch worker (one process, no torchrun) on CUDA, 1 rank\n"),
                    shipped.out());
        }

        InProcess.Run cpu = InProcess.finetune(quickstart, "--dry-run");
        assertEquals(0, cpu.exit(), cpu.out() + cpu.err());
        assertTrue(cpu.out().contains("run: single-device trainer (this JVM) on CPU, 1 rank\n"), cpu.out());
        assertTrue(cpu.out().endsWith("dry run: nothing started\n"), cpu.out());
    }

    /** A declared GPU the worker's torch cannot see: exit 2, one line naming the interpreter and torch, no file. */
    @Test
    void aDeclaredGpuTheWorkerCannotSeeIsRefusedBeforeAnythingIsWritten(@TempDir Path work) throws Exception {
        assumeTrue(Main.nvidiaGpus(Path.of("/proc/driver/nvidia/gpus")) == 0, "this machine has a GPU");
        Path python = PythonStack.python();
        Path out = work.resolve("out");
        MainProcessTest.Run run = MainProcessTest.run(work, configs().resolve("quickstart.yaml").toString(),
                "hardware={gpus: 1, gpu_memory: 24GiB}", "output_dir=" + out, "--python", python.toString());
        assertEquals(2, run.exit(), run.out() + run.err());
        assertTrue(run.out().contains("run: torch worker (one process, no torchrun) on CUDA, 1 rank"), run.out());
        List<String> errors = run.err().lines().filter(l -> l.startsWith("error: ")).toList();
        assertEquals(1, errors.size(), run.err());
        assertTrue(errors.get(0).startsWith("error: hardware: the recipe runs on a CUDA GPU, and " + python
                + " has none: torch "), errors.get(0));
        assertTrue(errors.get(0).contains("hint: "), errors.get(0));
        assertFalse(run.err().contains("Exception"), run.err());
        assertFalse(Files.exists(out), "nothing written");
        System.out.println(errors.get(0));
    }
}
