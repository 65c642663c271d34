package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.InvalidRecipe;
import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The torch worker's refusals before anything is written: a declared GPU the interpreter cannot see, QLoRA and
 * bitsandbytes' optimizers without bitsandbytes, on the CPU or over several ranks, optimizers the worker does not
 * have. The rules on reported environments, then the whole refusal with the venv's real (CPU-only) torch.
 */
class WorkerRequirementsTest {
    private static final String PYTHON = "/venv/bin/python";
    private static final WorkerPython.Environment CPU_BUILD = environment(0, null, null);
    private static final WorkerPython.Environment NO_DEVICE = environment(0, "12.8", null);
    private static final WorkerPython.Environment GPU = environment(1, "12.8", null);
    private static final WorkerPython.Environment GPU_WITH_BNB = environment(1, "12.8", "0.48.2");

    private static WorkerPython.Environment environment(int gpus, String cuda, String bitsandbytes) {
        return new WorkerPython.Environment(PYTHON, "3.11.7", Map.of("torch", cuda == null ? "2.13.0+cpu"
                : "2.13.0+cu128"), gpus, gpus > 0, bitsandbytes, cuda, gpus > 0 ? List.of("NVIDIA H100 80GB HBM3")
                : List.of(), bitsandbytes == null ? Map.of() : Map.of("bitsandbytes", bitsandbytes),
                null); // the worker's capabilities: not what these checks read
    }

    /** A recipe on one declared GPU (the worker's, at world size 1) with {@code keys} added. */
    private static ValidatedRecipe recipe(Path dir, String keys, String... overrides) throws IOException {
        Path file = dir.resolve("r.yaml");
        Files.writeString(file, """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                output_dir: %s
                sequence_len: 64
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                max_steps: 2
                learning_rate: 1e-3
                hardware: {gpus: 1, gpu_memory: 80GiB}
                """.formatted(WorkerEnvironment.stories260K(), WorkerEnvironment.data("quickstart.jsonl"),
                dir.resolve("out")) + keys);
        return ValidatedRecipe.load(file, List.of(overrides));
    }

    private static String refusal(ValidatedRecipe r, WorkerPython.Environment e) {
        UserError error = assertThrows(UserError.class, () -> WorkerRequirements.check(r.recipe(), e, PYTHON,
                r.run().device() == ResolvedRun.Device.CUDA));
        return error.oneLine();
    }

    /** What no interpreter could run is refused by validate, at the key's line (recipes' RunChecks). */
    private static String unrunnable(org.junit.jupiter.api.function.Executable load) {
        InvalidRecipe error = assertThrows(InvalidRecipe.class, load);
        return String.join("\n", error.errors().stream().map(f -> f.oneLine()).toList());
    }

    @Test
    void aDeclaredGpuNeedsOneTheInterpreterSees(@TempDir Path dir) throws IOException {
        ValidatedRecipe lora = recipe(dir, "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n");
        String cpuBuild = refusal(lora, CPU_BUILD);
        assertTrue(cpuBuild.contains(PYTHON + " has none: torch 2.13.0+cpu is a CPU-only build"), cpuBuild);
        assertTrue(cpuBuild.contains("hint:"), cpuBuild);
        String noDevice = refusal(lora, NO_DEVICE);
        assertTrue(noDevice.contains("(built for CUDA 12.8) sees no CUDA device"), noDevice);
        WorkerRequirements.check(lora.recipe(), GPU, PYTHON, true);
        // CPU ranks need no GPU
        WorkerRequirements.check(lora.recipe(), CPU_BUILD, PYTHON, false);
    }

    @Test
    void qloraNeedsBitsandbytesOnOneGpu(@TempDir Path dir) throws IOException {
        ValidatedRecipe qlora = recipe(dir, "adapter: qlora\nload_in_4bit: true\nlora_r: 4\nlora_alpha: 8\n"
                + "lora_target_linear: true\n");
        assertEquals(ResolvedRun.Backend.FSDP, qlora.run().backend());
        String missing = refusal(qlora, GPU);
        assertTrue(missing.contains("adapter: qlora needs bitsandbytes, and " + PYTHON + " cannot import it"), missing);
        assertTrue(missing.contains(PYTHON + " -m pip install bitsandbytes (all GPU extras: " + PYTHON + " -m "
                + "pip install -r trainers/src/main/python/requirements-gpu.txt)"), missing);
        WorkerRequirements.check(qlora.recipe(), GPU_WITH_BNB, PYTHON, true);

        String onCpu = unrunnable(() -> recipe(dir, "adapter: qlora\nload_in_4bit: true\nlora_r: 4\nlora_alpha: 8\n"
                + "lora_target_linear: true\n", "hardware=cpu", "backend=fsdp"));
        assertTrue(onCpu.contains("needs bitsandbytes on a CUDA GPU, and this run computes on the CPU"), onCpu);
        String sharded = unrunnable(() -> qlora.launchedAs(LaunchShape.torchrun(2, null)));
        assertTrue(sharded.contains("QLoRA over 2 ranks is unsupported: FSDP2 gathers bitsandbytes' 4-bit weights back as plain "
                + "tensors"), sharded);
    }

    @Test
    void bitsandbytesOptimizersNeedItOnOneGpu(@TempDir Path dir) throws IOException {
        for (String name : List.of("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit")) {
            ValidatedRecipe r = recipe(dir, "optimizer: " + name + "\n");
            String missing = refusal(r, GPU);
            assertTrue(missing.contains("optimizer: " + name + " needs bitsandbytes"), missing);
            WorkerRequirements.check(r.recipe(), GPU_WITH_BNB, PYTHON, true);
            String sharded = unrunnable(() -> r.launchedAs(LaunchShape.torchrun(4, null)));
            assertTrue(sharded.contains(name + " over 4 ranks"), sharded);
        }
        WorkerRequirements.check(recipe(dir, "optimizer: adamw_torch_fused\n").recipe(), CPU_BUILD, PYTHON, false);
    }

    @Test
    void optimizersTheWorkerDoesNotHaveAreRefusedNotReplacedByAdamW(@TempDir Path dir) throws IOException {
        for (String name : List.of("adamw_torch_8bit", "adamw_torch_4bit")) {
            String refused = unrunnable(() -> recipe(dir, "optimizer: " + name + "\n"));
            assertTrue(refused.contains("optimizer: " + name + " is unsupported: it is not in the torch worker"), refused);
            assertTrue(refused.contains("r.yaml:12:12"), refused);
        }
    }

    /** With the venv's own torch (a CPU build): exit-2 material, and not a file under output_dir. */
    @Test
    void aGpuRecipeOnThisMachinesTorchIsRefusedBeforeAnythingIsWritten(@TempDir Path dir) throws IOException {
        String python = WorkerEnvironment.python();
        ValidatedRecipe r = recipe(dir, "");
        // backend: auto on one declared GPU is the worker's, one process
        assertEquals(ResolvedRun.Backend.FSDP, r.run().backend());
        assertEquals(1, r.run().worldSize());
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        UserError error = assertThrows(UserError.class, () -> FsdpBackend.train(r, new FsdpBackend.Settings(
                Launch.local(r.run(), python), null, FsdpRuns.writer(log))));
        System.out.println(error.oneLine());
        assertEquals("hardware", error.where());
        assertTrue(error.getMessage().contains(python + " has none: torch 2.13.0"), error.getMessage());
        assertTrue(error.getMessage().contains("is a CPU-only build"), error.getMessage());
        assertFalse(Files.exists(dir.resolve("out")), "nothing written");
    }
}
