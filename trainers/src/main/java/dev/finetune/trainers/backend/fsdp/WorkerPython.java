package dev.finetune.trainers.backend.fsdp;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
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
 * ({@code -Dfinetune.home}), {@code python3}. {@link #check} runs {@code python -m finetune_worker check} once before
 * torchrun, so a missing or too old torch, transformers or peft is one message with the pip command that fixes it.
 */
public final class WorkerPython {
    /** The worker package's modules, as shipped in this jar. */
    static final List<String> MODULES = List.of("__init__.py", "__main__.py", "checkpoints.py", "data.py",
            "distributed.py", "environment.py", "extras.py", "grpo.py", "grpo_loss.py", "head_loss.py", "hf_files.py",
            "kernels.py", "objectives.py", "packed_attention.py", "reference.py", "reward_channel.py", "rollout.py",
            "sampler.py", "train.py");
    private static final String RESOURCES = "/dev/finetune/trainers/python/";

    /** What the interpreter reported about itself. */
    public record Environment(String executable, String python, Map<String, String> packages, int cudaDevices,
            boolean bf16, String bitsandbytes) {}

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
                    Path temporary = target.resolve("." + module + ".tmp");
                    Files.copy(in, temporary, StandardCopyOption.REPLACE_EXISTING);
                    Files.move(temporary, target.resolve(module), StandardCopyOption.REPLACE_EXISTING,
                            StandardCopyOption.ATOMIC_MOVE);
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
     * Runs {@code python -m finetune_worker check} with the worker extracted to a temporary folder (nothing is
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
        Path folder;
        try {
            folder = Files.createTempDirectory("finetune-worker-check");
        } catch (IOException e) {
            throw new UserError("python", "cannot make a temporary folder: " + e.getMessage(), "check TMPDIR");
        }
        try {
            return check(python, extract(folder));
        } finally {
            deleteQuietly(folder);
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

    /** Runs {@code python -m finetune_worker check} with the worker in {@code workerFolder}. */
    static Environment check(String python, Path workerFolder) {
        List<String> command = List.of(python, "-m", "finetune_worker", "check");
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        builder.environment().put("PYTHONPATH", workerFolder.toString());
        String output;
        int exit;
        try {
            Process process = builder.start();
            output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!process.waitFor(120, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                throw new UserError("python", python + " did not answer the worker's environment check in 120 s",
                        "check the interpreter (--python or FINETUNE_PYTHON)");
            }
            exit = process.exitValue();
        } catch (IOException e) {
            throw new UserError("python", "cannot run '" + python + "': " + e.getMessage(),
                    "install Python >= 3.10 with the worker's packages, or name the interpreter with --python or "
                            + "FINETUNE_PYTHON; then: " + pipCommand(python));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while checking " + python, e);
        }
        JsonObject report = lastJsonLine(output);
        if (report == null) {
            throw new UserError("python", "'" + python + " -m finetune_worker check' failed (exit " + exit + "): "
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
        return new Environment(report.get("executable").getAsString(), report.get("python").getAsString(), packages,
                report.get("cuda_devices").getAsInt(), report.get("bf16").getAsBoolean(),
                report.get("bitsandbytes").isJsonNull() ? null : report.get("bitsandbytes").getAsString());
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
