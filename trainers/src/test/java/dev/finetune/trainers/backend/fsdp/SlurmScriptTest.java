package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The sbatch script run by bash as Slurm would run it, with stand-ins for scontrol, srun and the node's launcher on
 * PATH that record what reaches them: nothing is submitted and nothing reaches the network.
 */
class SlurmScriptTest {
    // what a shell would otherwise split, expand, run or glob; each must reach every launcher as this one word
    private static final List<String> OVERRIDES = List.of("learning_rate=2e-4", "wandb_name=two words",
            "output_dir=./o'ut/$(touch PWNED)`touch PWNED2`", "wandb_notes=\"quoted\" \\back\\slash $HOME ${HOME} * ?",
            "wandb_project=line one\nline two\ttab", "wandb_entity=", "wandb_run_id=naïve-τ;exit 3|&");

    @Test
    void everyOverrideReachesEveryNodeUnchanged(@TempDir Path tmp) throws IOException {
        Cluster cluster = new Cluster(tmp, null);
        Map<String, String> env = cluster.slurmEnvironment();
        env.put("SLURM_JOB_CPUS_PER_NODE", "64,48");
        Outcome run = cluster.run(env);
        assertEquals(0, run.exit, run.output);

        assertEquals(List.of("show", "hostnames", "gpu-a[17-18]"), run.argv("scontrol"));
        List<String> preprocess = new ArrayList<>(List.of("preprocess", cluster.recipe.toString()));
        preprocess.addAll(OVERRIDES);
        assertEquals(preprocess, run.argv("preprocess"));
        for (int node = 0; node < 2; node++) {
            List<String> expected = new ArrayList<>(List.of(cluster.recipe.toString()));
            expected.addAll(OVERRIDES);
            expected.addAll(List.of("backend=fsdp", "--nnodes", "2", "--node-rank", Integer.toString(node),
                    "--nproc-per-node", "8", "--rdzv-endpoint", "gpu-a17:" + SlurmScript.PORT));
            assertEquals(expected, run.argv("node-" + node));
            Map<String, String> seen = run.environment("node-" + node);
            // the defaults, exactly as documented, reach every node's launcher
            SlurmScript.DEFAULTS.forEach((name, value) -> assertEquals(value, seen.get(name), name));
        }
        // srun's own options: one task per node holding the fewest CPUs any node of the job has
        assertEquals(List.of("--ntasks-per-node=1", "--kill-on-bad-exit=1", "--export=ALL", "--cpus-per-task=48",
                "bash", "-c"), run.argv("srun").subList(0, 6));
        try (Stream<Path> made = Files.list(cluster.work)) {
            assertEquals(List.of(), made.map(p -> p.getFileName().toString()).toList(), "an override ran a command");
        }
    }

    @Test
    void valuesExportedAtSubmissionWin(@TempDir Path tmp) throws IOException {
        Cluster cluster = new Cluster(tmp, 12);
        assertTrue(cluster.script.contains("\n#SBATCH --cpus-per-task=12\n"), cluster.script);
        Map<String, String> env = cluster.slurmEnvironment();
        // what sbatch --cpus-per-task=12 sets in the batch step; srun (>= 22.05) would not read it itself
        env.put("SLURM_CPUS_PER_TASK", "12");
        env.put("SLURM_JOB_CPUS_PER_NODE", "64(x2)");
        env.put("NCCL_DEBUG", "INFO");
        Outcome run = cluster.run(env);
        assertEquals(0, run.exit, run.output);
        assertTrue(run.argv("srun").contains("--cpus-per-task=12"), run.argv("srun").toString());
        for (String node : List.of("node-0", "node-1")) {
            assertEquals("INFO", run.environment(node).get("NCCL_DEBUG"));
            assertEquals(SlurmScript.DEFAULTS.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"),
                    run.environment(node).get("TORCH_NCCL_ASYNC_ERROR_HANDLING"));
        }
    }

    @Test
    void theCpuCountComesFromSlurmOrTheScriptStops(@TempDir Path tmp) throws IOException {
        Cluster cluster = new Cluster(tmp, null);
        assertFalse(cluster.script.contains("#SBATCH --cpus-per-task"), cluster.script);
        Map<String, String> env = cluster.slurmEnvironment();
        env.put("SLURM_CPUS_ON_NODE", "8");
        Outcome onNode = cluster.run(env);
        assertEquals(0, onNode.exit, onNode.output);
        assertTrue(onNode.argv("srun").contains("--cpus-per-task=8"), onNode.argv("srun").toString());

        // outside an allocation nothing says how many CPUs there are: stop before anything starts
        Cluster bare = new Cluster(tmp.resolve("bare"), null);
        Outcome none = bare.run(bare.slurmEnvironment());
        assertNotEquals(0, none.exit, none.output);
        assertTrue(none.output.contains("SLURM_CPUS_ON_NODE"), none.output);
        assertFalse(Files.exists(bare.records.resolve("preprocess.argv")), "the launcher ran");
        assertFalse(Files.exists(bare.records.resolve("srun.argv")), "srun ran");

        assertThrows(UserError.class, () -> SlurmScript.render("finetune", cluster.recipe, List.of(),
                cluster.launch, "j", tmp, 0));
    }

    @Test
    void sbatchReadsEveryDirectiveAndTheDocsNameEveryVariable(@TempDir Path tmp) throws IOException {
        String script = new Cluster(tmp, 4).script;
        // sbatch stops reading #SBATCH lines at the first command
        List<String> lines = script.lines().toList();
        int firstCommand = 1;
        while (lines.get(firstCommand).startsWith("#")) {
            firstCommand++;
        }
        for (int i = firstCommand; i < lines.size(); i++) {
            assertFalse(lines.get(i).startsWith("#SBATCH"), lines.get(i));
        }
        assertTrue(lines.subList(0, firstCommand).contains("#SBATCH --cpus-per-task=4"), script);
        String docs = Files.readString(WorkerEnvironment.repoRoot().resolve("docs/multi-gpu.md"));
        SlurmScript.DEFAULTS.forEach((name, value) -> assertTrue(docs.contains("`" + name + "=" + value + "`"), name));
    }

    /** A rendered script, stand-ins that record into {@link #records}, and an empty folder to run it in. */
    private static final class Cluster {
        final Path recipe;
        final Path records;
        final Path work;
        final Path bin;
        final Launch launch;
        final String script;
        final Path file;

        Cluster(Path tmp, Integer cpusPerTask) throws IOException {
            Files.createDirectories(tmp);
            recipe = tmp.resolve("gpus.yaml");
            launch = new Launch(FsdpLaunchTest.gpuRecipe(tmp, 2).run(), 0, "x:1", null, false);
            records = Files.createDirectories(tmp.resolve("records"));
            work = Files.createDirectories(tmp.resolve("work"));
            bin = Files.createDirectories(tmp.resolve("bin"));
            String rec = ShellWords.quote(records.toString());
            // the second name comes late, as from a scontrol that writes line by line: a script that stops reading
            // after the first (| head -n 1 under pipefail) then dies of SIGPIPE
            standIn("scontrol", "printf '%s\\0' \"$@\" > " + rec + "/scontrol.argv\necho gpu-a17\nsleep 0.2\n"
                    + "echo gpu-a18\n");
            // srun: records its argv, then runs the command after its own options as node 0 and node 1
            standIn("srun", "printf '%s\\0' \"$@\" > " + rec + "/srun.argv\n"
                    + "while [ \"${1#--}\" != \"$1\" ]; do shift; done\n"
                    + "SLURM_NNODES=2 SLURM_NODEID=0 \"$@\" && SLURM_NNODES=2 SLURM_NODEID=1 \"$@\"\n");
            Path launcher = standIn("finetune", "if [ \"$1\" = preprocess ]; then name=preprocess; "
                    + "else name=node-$SLURM_NODEID; fi\n"
                    + "printf '%s\\0' \"$@\" > " + rec + "/$name.argv\nenv -0 > " + rec + "/$name.env\n");
            script = SlurmScript.render(launcher.toString(), recipe, OVERRIDES, launch, "finetune-out",
                    tmp.resolve("out"), cpusPerTask);
            file = Files.writeString(tmp.resolve("launch.sbatch"), script);
        }

        private Path standIn(String name, String body) throws IOException {
            Path path = Files.writeString(bin.resolve(name), "#!/usr/bin/env bash\n" + body);
            assertTrue(path.toFile().setExecutable(true));
            return path;
        }

        /** The batch step's environment on the first node, with nothing of this machine's NCCL or Slurm settings. */
        Map<String, String> slurmEnvironment() {
            Map<String, String> env = new HashMap<>();
            env.put("PATH", bin + ":" + System.getenv("PATH"));
            env.put("HOME", System.getProperty("user.home"));
            env.put("SLURM_JOB_NODELIST", "gpu-a[17-18]");
            env.put("SLURM_NNODES", "2");
            env.put("SLURM_NODEID", "0");
            return env;
        }

        Outcome run(Map<String, String> env) throws IOException {
            ProcessBuilder builder = new ProcessBuilder("bash", file.toString()).directory(work.toFile())
                    .redirectErrorStream(true);
            builder.environment().clear();
            builder.environment().putAll(env);
            Process process = builder.start();
            process.getOutputStream().close();
            String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            try {
                return new Outcome(process.waitFor(), output, records);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
    }

    private record Outcome(int exit, String output, Path records) {
        List<String> argv(String who) {
            return words(records.resolve(who + ".argv"));
        }

        Map<String, String> environment(String who) {
            Map<String, String> env = new HashMap<>();
            for (String entry : words(records.resolve(who + ".env"))) {
                int eq = entry.indexOf('=');
                env.put(entry.substring(0, eq), entry.substring(eq + 1));
            }
            return env;
        }

        private static List<String> words(Path file) {
            try {
                String text = Files.readString(file, StandardCharsets.UTF_8);
                // NUL-terminated: an empty final word is still a word
                return Arrays.asList(text.substring(0, text.length() - 1).split("\0", -1));
            } catch (IOException e) {
                throw new AssertionError("nothing recorded in " + file + ": it did not run", e);
            }
        }
    }
}
