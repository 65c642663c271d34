package dev.finetune.trainers.backend.fsdp;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.adapters.io.AtomicFiles;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * The Python interpreter that runs the worker, and the worker's files.
 *
 * <p>Found in this order: {@code --python}, {@code FINETUNE_PYTHON}, {@code .venv/bin/python} beside the launcher
 * ({@code -Dfinetune.home}), {@code python3}. {@link #check} runs the worker's {@code check} once before
 * torchrun, so a missing or too old torch, transformers or peft is one message with the pip command that fixes it.
 */
public final class WorkerPython {
    /** The worker package's files, as shipped in this jar: its modules and the capabilities it declares. */
    static final List<String> MODULES = List.of("__init__.py", "__main__.py", "capabilities.json", "checkpoints.py",
            "data.py", "distributed.py", "environment.py", "extras.py", "families.py", "generate.py", "grpo.py",
            "grpo_loss.py", "head_loss.py", "hf_files.py", "hf_layout.py", "kernels.py", "launcher_link.py",
            "loading.py", "memory.py", "meta_terms.py", "objectives.py", "optimizers.py", "packed_attention.py",
            "plan.py", "precision.py", "reference.py", "reward_channel.py", "rollout.py", "safe_dcp.py", "sampler.py",
            "train.py", "vocab_parallel.py");
    private static final String RESOURCES = "/dev/finetune/trainers/python/";

    /**
     * What the interpreter reported about itself, and what the worker it runs supports.
     *
     * @param torchCuda the CUDA version torch was built for, null for a CPU-only build
     * @param cudaNames each visible CUDA device's name
     * @param bitsandbytes its version when it imports, else null
     * @param gpuExtras every package of requirements-gpu.txt with its installed version, or absent
     * @param capabilities what the worker implements
     */
    public record Environment(String executable, String python, Map<String, String> packages, int cudaDevices,
            boolean bf16, String bitsandbytes, String torchCuda, List<String> cudaNames,
            Map<String, String> gpuExtras, Capabilities capabilities) {

        /** What torch says about CUDA, in words: the reason a recipe that declares a GPU cannot have one here. */
        public String cudaReport() {
            String torch = "torch " + packages.getOrDefault("torch", "?");
            if (torchCuda == null) {
                return torch + " is a CPU-only build (torch.version.cuda is None)";
            }
            return cudaDevices == 0 ? torch + " (built for CUDA " + torchCuda + ") sees no CUDA device "
                    + "(torch.cuda.is_available() is False)"
                    : torch + " sees " + cudaDevices + " CUDA device(s): " + String.join(", ", cudaNames);
        }
    }

    /**
     * What the worker implements, as it says itself ({@code python -m finetune_worker capabilities}, also part of
     * {@code check}): Java keeps no copy of the worker's lists.
     *
     * @param planFormat the {@code plan.json} version its loader reads
     * @param objectives the objectives it trains
     * @param dpoLossTypes TRL's DPO loss types it implements
     */
    public record Capabilities(String planFormat, List<String> objectives, List<String> dpoLossTypes) {}

    private WorkerPython() {}

    /** The interpreter to use; {@code option} is {@code --python} or null. */
    public static String find(String option, Map<String, String> environment, String launcherHome) {
        if (option != null && !option.isBlank()) {
            return option;
        }
        String fromEnvironment = environment.get("FINETUNE_PYTHON");
        if (fromEnvironment != null && !fromEnvironment.isBlank()) {
            return fromEnvironment;
        }
        if (launcherHome != null) {
            Path venv = Path.of(launcherHome).resolve(".venv/bin/python");
            if (Files.isExecutable(venv)) {
                return venv.toString();
            }
        }
        return "python3";
    }

    /**
     * The worker's own copy of its code, in a private temporary folder (mode 700) made for one launch: the working
     * folder, the recipe's and output_dir are never on the worker's path, so a file planted there (a {@code peft.py}
     * in a shared recipe folder) can never stand in for a module it imports. Deleted when closed.
     */
    public record Code(Path folder) implements AutoCloseable {
        /** The file the interpreter runs: the package's {@code __main__.py}, which puts {@link #folder} on its path. */
        public Path entry() {
            return folder.resolve("finetune_worker").resolve("__main__.py");
        }

        @Override
        public void close() {
            deleteQuietly(folder);
        }
    }

    /** Extracts the worker into a new private temporary folder. */
    public static Code privateCopy() {
        Path folder;
        try {
            folder = Files.createTempDirectory("finetune-worker-", java.nio.file.attribute.PosixFilePermissions
                    .asFileAttribute(java.nio.file.attribute.PosixFilePermissions.fromString("rwx------")));
        } catch (IOException | UnsupportedOperationException e) {
            throw new UserError(System.getProperty("java.io.tmpdir"), "cannot make a private folder for the "
                    + "worker's code: " + e.getMessage(), "point TMPDIR at a writable local folder (the finetune "
                    + "command passes it to Java as java.io.tmpdir)");
        }
        extract(folder);
        return new Code(folder);
    }

    /**
     * How an interpreter runs the worker: isolated mode ({@code -I}: neither the working folder nor the script's
     * folder nor the user's site-packages on {@code sys.path}, no {@code PYTHON*} variables), unbuffered, from its
     * own copy.
     */
    public static List<String> command(String python, Path entry, String... args) {
        List<String> command = new ArrayList<>(List.of(python, "-I", "-u", entry.toString()));
        command.addAll(List.of(args));
        return command;
    }

    /** Copies the worker package from this jar into {@code folder}/finetune_worker; returns {@code folder}. */
    public static Path extract(Path folder) {
        Path target = folder.resolve("finetune_worker");
        try {
            Files.createDirectories(target);
            for (String module : MODULES) {
                try (InputStream in = WorkerPython.class.getResourceAsStream(RESOURCES + "finetune_worker/" + module)) {
                    if (in == null) {
                        throw new IllegalStateException("the worker module " + module + " is missing from this build");
                    }
                    AtomicFiles.write(target.resolve(module),
                            temporary -> Files.copy(in, temporary, StandardCopyOption.REPLACE_EXISTING));
                }
            }
            return folder;
        } catch (IOException e) {
            throw new UserError(folder.toString(), "cannot write the worker's files: " + e.getMessage(),
                    "check that output_dir is writable", e);
        }
    }

    /** The pip command that installs what the worker needs into {@code python}'s environment. */
    public static String pipCommand(String python) {
        return python + " -m pip install torch transformers peft safetensors  # or: " + python
                + " -m pip install -r trainers/src/main/python/requirements.txt (the pinned versions)";
    }

    /**
     * Interpreters that passed, by the name they were given: their packages do not change under a running launcher,
     * and a process that launches many runs (the test suite, a sweep) would otherwise pay a Python start importing
     * torch before each. A refusal is not kept: it is asked again.
     */
    private static final Map<String, Environment> PASSED = new ConcurrentHashMap<>();

    /**
     * Runs the worker's {@code check} with the worker extracted to a private temporary folder (nothing is
     * written under output_dir before the check passes), once per interpreter in this process; refuses what cannot
     * run it.
     */
    public static Environment check(String python) {
        Environment passed = PASSED.get(python);
        if (passed != null) {
            return passed;
        }
        Environment environment = checkNow(python);
        PASSED.put(python, environment);
        return environment;
    }

    private static Environment checkNow(String python) {
        try (Code code = privateCopy()) {
            return check(python, code.folder());
        }
    }

    private static void deleteQuietly(Path folder) {
        try (var walk = Files.walk(folder)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        } catch (IOException e) {
            // a temporary folder left behind is harmless
        }
    }

    /** What a short worker command printed, and its exit code. */
    private record Answer(int exit, String output) {}

    /**
     * Runs a short worker command within {@link #checkSeconds} (an interpreter that hangs at start is stopped),
     * reading at most {@link #MAX_CHECK_OUTPUT} bytes of what it prints (one that floods its output is stopped too).
     *
     * @param what the command, as messages name it ("environment check")
     */
    private static Answer ask(String python, List<String> command, String what) {
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        int seconds = checkSeconds(System.getenv());
        try {
            Process process = builder.start();
            process.getOutputStream().close();
            BoundedOutput read = new BoundedOutput(process);
            read.start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
            boolean ended;
            do {
                ended = process.waitFor(50, TimeUnit.MILLISECONDS);
            } while (!ended && !read.overflowed() && System.nanoTime() < deadline);
            if (!ended || read.overflowed()) {
                process.descendants().forEach(ProcessHandle::destroyForcibly);
                process.destroyForcibly();
                process.waitFor(10, TimeUnit.SECONDS);
                throw new UserError("python", read.overflowed()
                        ? "'" + python + "' printed more than " + MAX_CHECK_OUTPUT / 1024 + " KiB during the worker's "
                                + what + " (it prints one short line): stopped"
                        : "'" + python + "' did not answer the worker's " + what + " in " + seconds + " s: stopped",
                        "check the interpreter (--python or FINETUNE_PYTHON): '" + python + " -c \"import torch\"' "
                                + "should finish in seconds");
            }
            read.join(10_000);
            return new Answer(process.exitValue(), read.text());
        } catch (IOException e) {
            throw new UserError("python", "cannot run '" + python + "': " + e.getMessage(),
                    "install Python >= 3.10 with the worker's packages, or name the interpreter with --python or "
                            + "FINETUNE_PYTHON; then: " + pipCommand(python));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while running " + python, e);
        }
    }

    /**
     * Whether the DCP metadata of a worker checkpoint reads as plain metadata (finetune_worker/safe_dcp.py): the
     * problem, or null. Asked before a resume starts any rank, so a crafted file is a refusal, never a traceback.
     */
    public static String checkpointProblem(String python, Path checkpoint) {
        try (Code code = privateCopy()) {
            Answer answer = ask(python, command(python, code.entry(), "verify-checkpoint",
                    checkpoint.toAbsolutePath().toString()), "checkpoint check");
            JsonObject report = lastJsonLine(answer.output());
            if (report == null || !report.has("problem")) {
                throw new UserError("python", "the worker's checkpoint check failed (exit " + answer.exit() + "): "
                        + lastLine(answer.output()), "use Python >= 3.10 with the worker's packages: "
                        + pipCommand(python));
            }
            return report.get("problem").isJsonNull() ? null : report.get("problem").getAsString();
        }
    }

    /** Runs the worker's {@code check} with the worker in {@code workerFolder}. */
    static Environment check(String python, Path workerFolder) {
        Answer answer = ask(python, command(python, new Code(workerFolder).entry(), "check"), "environment check");
        String output = answer.output();
        int exit = answer.exit();
        JsonObject report = lastJsonLine(output);
        if (report == null) {
            throw new UserError("python", "the worker's environment check with '" + python + "' failed (exit " + exit + "): "
                    + lastLine(output), "use Python >= 3.10 with the worker's packages: " + pipCommand(python));
        }
        List<String> problems = new ArrayList<>();
        report.getAsJsonArray("problems").forEach(p -> problems.add(p.getAsString()));
        if (!problems.isEmpty()) {
            throw new UserError("python", python + " cannot run the fsdp worker: " + String.join("; ", problems),
                    pipCommand(python));
        }
        Map<String, String> packages = new java.util.TreeMap<>();
        report.getAsJsonObject("packages").entrySet().forEach(e -> packages.put(e.getKey(), e.getValue().getAsString()));
        List<String> names = new ArrayList<>();
        if (report.has("cuda_names")) {
            report.getAsJsonArray("cuda_names").forEach(n -> names.add(n.getAsString()));
        }
        Map<String, String> extras = new java.util.TreeMap<>();
        if (report.has("gpu_extras")) {
            report.getAsJsonObject("gpu_extras").entrySet().stream().filter(e -> !e.getValue().isJsonNull())
                    .forEach(e -> extras.put(e.getKey(), e.getValue().getAsString()));
        }
        JsonObject capabilities = report.getAsJsonObject("capabilities");
        Capabilities worker = new Capabilities(capabilities.get("plan_format").getAsString(),
                strings(capabilities, "objectives"), strings(capabilities, "dpo_loss_types"));
        if (!worker.planFormat().equals(WorkerPlanFile.FORMAT)) {
            throw new IllegalStateException("the worker in this build reads " + worker.planFormat() + ", the launcher "
                    + "writes " + WorkerPlanFile.FORMAT);
        }
        return new Environment(report.get("executable").getAsString(), report.get("python").getAsString(), packages,
                report.get("cuda_devices").getAsInt(), report.get("bf16").getAsBoolean(),
                report.get("bitsandbytes").isJsonNull() ? null : report.get("bitsandbytes").getAsString(),
                report.has("torch_cuda") && !report.get("torch_cuda").isJsonNull()
                        ? report.get("torch_cuda").getAsString() : null, List.copyOf(names), extras, worker);
    }

    private static List<String> strings(JsonObject object, String key) {
        List<String> out = new ArrayList<>();
        object.getAsJsonArray(key).forEach(e -> out.add(e.getAsString()));
        return List.copyOf(out);
    }

    /** The most the environment check may print: its report is one line of a few hundred bytes. */
    static final int MAX_CHECK_OUTPUT = 256 * 1024;

    /** How long the environment check may take (it imports torch, transformers and peft): 120 s unless set. */
    static int checkSeconds(Map<String, String> environment) {
        String given = environment.get("FINETUNE_PYTHON_CHECK_SECONDS");
        try {
            return given == null ? 120 : Math.max(1, Integer.parseInt(given.strip()));
        } catch (NumberFormatException e) {
            return 120;
        }
    }

    /** Reads a child's output up to {@link #MAX_CHECK_OUTPUT} bytes, in its own thread (the child never blocks). */
    private static final class BoundedOutput extends Thread {
        private final Process process;
        private final java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        private volatile boolean overflowed;

        BoundedOutput(Process process) {
            super("python-check-output");
            setDaemon(true);
            this.process = process;
        }

        @Override
        public void run() {
            byte[] buffer = new byte[8192];
            try (InputStream in = process.getInputStream()) {
                for (int n; (n = in.read(buffer)) > 0; ) {
                    synchronized (bytes) {
                        if (bytes.size() + n > MAX_CHECK_OUTPUT) {
                            overflowed = true;
                            return;
                        }
                        bytes.write(buffer, 0, n);
                    }
                }
            } catch (IOException e) {
                // the process was stopped
            }
        }

        boolean overflowed() {
            return overflowed;
        }

        String text() {
            synchronized (bytes) {
                return bytes.toString(StandardCharsets.UTF_8);
            }
        }
    }

    private static JsonObject lastJsonLine(String output) {
        String[] lines = output.split("\n");
        for (int i = lines.length - 1; i >= 0; i--) {
            String line = lines[i].strip();
            if (line.startsWith("{")) {
                try {
                    return JsonParser.parseString(line).getAsJsonObject();
                } catch (RuntimeException e) {
                    return null;
                }
            }
        }
        return null;
    }

    private static String lastLine(String output) {
        String[] lines = output.strip().split("\n");
        return lines.length == 0 ? "(no output)" : lines[lines.length - 1];
    }
}
