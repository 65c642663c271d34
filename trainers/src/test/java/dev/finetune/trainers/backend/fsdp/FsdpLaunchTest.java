package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.InvalidRecipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.WorkerCapabilities;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** What the launcher would start, checked without starting it: dry runs for 1 x 8 and 2 x 8 GPUs, sbatch. */
class FsdpLaunchTest {

    static ValidatedRecipe gpuRecipe(Path tmp, int nodes) throws IOException {
        return FsdpRuns.recipe(tmp, "gpus", """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                output_dir: %s
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_target_linear: true
                sequence_len: 256
                micro_batch_size: 2
                gradient_accumulation_steps: 4
                num_epochs: 1
                learning_rate: 1e-4
                seed: 11
                hardware: {gpus: 8, nodes: %d, gpu_memory: 80GiB}
                backend: fsdp
                fsdp_version: 2
                fsdp_config: {reshard_after_forward: true}
                """.formatted(WorkerEnvironment.stories260K(), WorkerEnvironment.data("quickstart.jsonl"),
                tmp.resolve("out"), nodes));
    }

    @Test
    void oneNodeOfEightGpus(@TempDir Path tmp) throws IOException {
        ValidatedRecipe recipe = gpuRecipe(tmp, 1);
        Launch launch = new Launch(recipe.run(), 0, null, null, true);
        assertEquals(8, launch.worldSize());
        String text = FsdpBackend.dryRun(recipe, launch, "/opt/py/bin/python");
        Path worker = tmp.resolve("out").toAbsolutePath().resolve("worker");
        // torchrun and the ranks run isolated (-I), the worker from a private copy of its own code
        Path code = Path.of(System.getProperty("java.io.tmpdir"), "finetune-worker-XXXX", "finetune_worker",
                "__main__.py");
        assertTrue(text.contains("command: /opt/py/bin/python -I -m torch.distributed.run --standalone "
                + "--nproc-per-node 8 --tee 3 --log-dir " + worker.resolve("logs") + " --no-python /opt/py/bin/python "
                + "-I -u " + code + " " + worker.resolve("plan.json")), text);
        assertFalse(text.contains("PYTHONPATH"), text);
        assertTrue(text.matches("(?s).*\n  OMP_NUM_THREADS=[1-9][0-9]*\n.*"), text);
        assertTrue(text.contains("world size: 8 (1 node x 8 processes per node)"), text);
        assertTrue(text.contains("global batch: micro 2 x ranks 8 x accumulation 4 = 64 sequences per optimizer step "
                + "(32 micro batches)"), text);
        assertTrue(text.contains("positions [32*s, 32*s + 32) of the seed-11 order; rank r takes positions r, r+8"),
                text);
        assertTrue(text.startsWith("dry run: nothing started"));
        assertTrue(Files.notExists(tmp.resolve("out")), "a dry run writes nothing");
    }

    @Test
    void twoNodesOfEightGpus(@TempDir Path tmp) throws IOException {
        ValidatedRecipe recipe = gpuRecipe(tmp, 2);
        Launch launch = new Launch(recipe.run(), 1, "node001:29500", null, true);
        assertEquals(16, launch.worldSize());
        String text = FsdpBackend.dryRun(recipe, launch, "python3");
        assertTrue(text.contains("-m torch.distributed.run --nnodes 2 --node-rank 1 --rdzv-backend c10d "
                + "--rdzv-endpoint node001:29500 --rdzv-id finetune-"), text);
        assertTrue(text.contains("--nproc-per-node 8 --tee 3"), text);
        assertTrue(text.contains("world size: 16 (2 nodes x 8 processes per node), this node's rank 1"), text);
        assertTrue(text.contains("global batch: micro 2 x ranks 16 x accumulation 4 = 128 sequences"), text);
        UserError noEndpoint = assertThrows(UserError.class,
                () -> new Launch(recipe.run(), 0, null, null, true));
        assertTrue(noEndpoint.getMessage().contains("rendezvous"));
    }

    @Test
    void theSbatchScriptStartsOneLauncherPerNode(@TempDir Path tmp) throws IOException {
        ValidatedRecipe recipe = gpuRecipe(tmp, 2);
        Launch launch = new Launch(recipe.run(), 0, "x:1", null, false);
        String script = SlurmScript.render("/shared/finetune/finetune", tmp.resolve("gpus.yaml"),
                List.of("learning_rate=2e-4"), launch, "finetune-out", tmp.resolve("out"), null);
        assertTrue(script.contains("#SBATCH --nodes=2\n"), script);
        assertTrue(script.contains("#SBATCH --gpus-per-node=8\n"), script);
        assertTrue(script.contains("\n/shared/finetune/finetune preprocess " + tmp.resolve("gpus.yaml")
                + " learning_rate=2e-4\n"), script);
        // the node's launcher and its arguments are "$@" of a fixed script: no value is ever pasted into its text
        assertTrue(script.contains("srun --ntasks-per-node=1 --kill-on-bad-exit=1 --export=ALL "
                + "--cpus-per-task=\"$cpus\" bash -c 'exec \"$@\" "
                + "--nnodes \"$SLURM_NNODES\" --node-rank \"$SLURM_NODEID\" --nproc-per-node 8 --rdzv-endpoint "
                + "\"$0:29500\"' \"$head_node\" /shared/finetune/finetune " + tmp.resolve("gpus.yaml")
                + " learning_rate=2e-4 backend=fsdp\n"), script);
        // bash can parse it
        Path file = tmp.resolve("launch.sbatch");
        Files.writeString(file, script);
        try {
            Process check = new ProcessBuilder("bash", "-n", file.toString()).redirectErrorStream(true).start();
            assertEquals(0, check.waitFor(), new String(check.getInputStream().readAllBytes()));
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
    }

    @Test
    void eachRankGetsItsShareOfTheLaunchersCpusUnlessTheUserSaid(@TempDir Path tmp) throws IOException {
        Launch eightGpus = new Launch(gpuRecipe(tmp, 1).run(), 0, null, null, true);
        // 64 CPUs bound to the launcher (srun --cpus-per-task=64) over 8 ranks; torchrun alone would give each 1
        assertEquals("8", eightGpus.environment(64, Map.of()).get("OMP_NUM_THREADS"));
        assertEquals("1", eightGpus.environment(4, Map.of()).get("OMP_NUM_THREADS"));
        assertEquals("3", eightGpus.environment(64, Map.of("OMP_NUM_THREADS", "3")).get("OMP_NUM_THREADS"));
    }

    @Test
    void thePythonIsLookedUpInOrder(@TempDir Path tmp) throws IOException {
        Path home = tmp.resolve("home");
        Files.createDirectories(home.resolve(".venv/bin"));
        Path venv = Files.createFile(home.resolve(".venv/bin/python"));
        venv.toFile().setExecutable(true);
        assertEquals("/x/python", WorkerPython.find("/x/python", Map.of("FINETUNE_PYTHON", "/y"), home.toString()));
        assertEquals("/y", WorkerPython.find(null, Map.of("FINETUNE_PYTHON", "/y"), home.toString()));
        assertEquals(venv.toString(), WorkerPython.find(null, Map.of(), home.toString()));
        assertEquals("python3", WorkerPython.find(null, Map.of(), tmp.resolve("nowhere").toString()));
    }

    @Test
    void theJarShipsEveryWorkerModule(@TempDir Path tmp) throws IOException {
        Path source = WorkerEnvironment.repoRoot().resolve("trainers/src/main/python/finetune_worker");
        try (Stream<Path> files = Files.list(source)) {
            assertEquals(files.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".py") || n.equals("capabilities.json")).sorted().toList(),
                    WorkerPython.MODULES.stream().sorted().toList());
        }
        WorkerPython.extract(tmp);
        for (String module : WorkerPython.MODULES) {
            assertEquals(Files.readString(source.resolve(module)), Files.readString(tmp.resolve("finetune_worker")
                    .resolve(module)));
        }
    }

    @Test
    void aMissingTorchIsOneMessageWithThePipCommand(@TempDir Path tmp) throws IOException {
        // the system's python3 has no torch in a fresh venv: the check must say so and name the fix
        Path bare = tmp.resolve("bare");
        try {
            Process venv = new ProcessBuilder("python3", "-m", "venv", "--without-pip", bare.toString()).start();
            assertEquals(0, venv.waitFor());
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
        WorkerPython.extract(tmp);
        UserError error = assertThrows(UserError.class,
                () -> WorkerPython.check(bare.resolve("bin/python").toString(), tmp));
        assertTrue(error.getMessage().contains("torch is not installed"), error.getMessage());
        assertTrue(error.oneLine().contains("-m pip install"), error.oneLine());
    }

    @Test
    void whatTheWorkerDoesNotRunIsRefusedBeforeAnythingIsWritten(@TempDir Path tmp) throws IOException {
        Path out = tmp.resolve("out");
        String base = """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                output_dir: %s
                sequence_len: 128
                micro_batch_size: 2
                gradient_accumulation_steps: 1
                max_steps: 2
                learning_rate: 1e-4
                hardware: cpu
                backend: fsdp
                """.formatted(WorkerEnvironment.stories260K(), WorkerEnvironment.data("quickstart.jsonl"), out);
        // QLoRA on the worker's CPU ranks: validate refuses it at its line (recipes' RunChecks), whatever the
        // interpreter has; sharded QLoRA likewise (WorkerRequirementsTest)
        InvalidRecipe qlora = assertThrows(InvalidRecipe.class, () -> FsdpRuns.recipe(tmp, "qlora", base + """
                adapter: qlora
                load_in_4bit: true
                lora_r: 8
                lora_alpha: 16
                lora_target_linear: true
                """));
        assertTrue(qlora.errors().get(0).message().contains("adapter: qlora on the torch worker is unsupported on the "
                + "CPU"), qlora.errors().toString());
        assertTrue(qlora.errors().get(0).where().endsWith("qlora.yaml:13:10"), qlora.errors().toString());

        // a DPO loss type the worker lacks: validate (and so --dry-run) refuses it at its line, no Python started
        InvalidRecipe nca = assertThrows(InvalidRecipe.class, () -> FsdpRuns.recipe(tmp, "nca", base
                .replace("type: completion", "type: passthrough").replace("quickstart.jsonl", "quickstart-dpo.jsonl")
                + "rl: dpo\ndpo_loss_type: [sigmoid, nca_pair]\ndpo_loss_weights: [1.0, 0.5]\n"));
        assertEquals(1, nca.errors().size(), nca.errors().toString());
        assertTrue(nca.errors().get(0).message().startsWith("dpo_loss_type nca_pair is unsupported by the torch "
                + "worker, where this recipe runs (CPU, 1 rank): it implements sigmoid, hinge, ipo, sigmoid_norm"),
                nca.errors().toString());
        assertTrue(nca.errors().get(0).where().endsWith("nca.yaml:14:16"), nca.errors().toString());
        assertTrue(Files.notExists(out), "refusals write nothing");
    }

    @Test
    void validateReadsTheCapabilitiesTheWorkerReports() {
        // one file declares them (finetune_worker/capabilities.json); the interpreter's report is built from it
        WorkerPython.Capabilities reported = WorkerPython.check(WorkerEnvironment.python()).capabilities();
        WorkerCapabilities declared = WorkerCapabilities.declared();
        assertEquals(reported.objectives(), declared.objectives());
        assertEquals(reported.dpoLossTypes(), declared.dpoLossTypes());
        // and Java's own objectives and loss types name every one of them
        for (String type : declared.dpoLossTypes()) {
            assertTrue(dev.finetune.recipes.DpoLossType.of(type) != null, type);
        }
    }
}
