package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The project's Python environment ({@code <repo>/.venv}, made by the test build) for tests that check our files
 * with the real libraries (transformers, PEFT). Missing, such a test skips, except under {@code CI=true}, where it
 * fails: CI installs the stack. (The trainers module's tests have the same helper; of their test code the cli uses
 * only TinyFamilies' models, through trainers' test jar.)
 */
final class PythonStack {
    private PythonStack() {}

    /** What {@link #python} found, once per test JVM: the import alone costs seconds of two busy cores each time. */
    private static String problem;
    private static boolean checked;

    static synchronized Path python() {
        Path python = MainProcessTest.repoRoot().resolve(".venv/bin/python");
        if (!checked) {
            if (!Files.isExecutable(python)) {
                problem = python + " is missing";
            } else if (run(List.of(python.toString(), "-c", "import torch, transformers, peft"), null).exit() != 0) {
                problem = python + " cannot import torch, transformers and peft";
            }
            checked = true;
        }
        if (problem != null) {
            if ("true".equals(System.getenv("CI"))) {
                fail(problem + " (CI=true: the test build must create it from trainers/src/main/python/requirements.txt)");
            }
            assumeTrue(false, problem);
        }
        return python;
    }

    /** Runs a script of the test resources with {@code args}; fails the test with its output unless it exits 0. */
    static void runScript(String resource, Path workDir, String... args) throws IOException {
        Path script = workDir.resolve(resource.substring(resource.lastIndexOf('/') + 1));
        if (!Files.exists(script)) {
            try (InputStream in = PythonStack.class.getResourceAsStream(resource)) {
                Files.copy(in, script);
            }
        }
        List<String> command = new ArrayList<>(List.of(python().toString(), script.toString()));
        command.addAll(List.of(args));
        Result result = run(command, workDir);
        assertEquals(0, result.exit(), "python " + script.getFileName() + " failed:\n" + result.output());
    }

    /**
     * Runs the worker's own entry point ({@code finetune_worker/__main__.py}, as the launcher does) with {@code args};
     * fails the test with its output unless it exits 0.
     */
    static void runWorker(Path workDir, String... args) {
        Path main = MainProcessTest.repoRoot().resolve("trainers/src/main/python/finetune_worker/__main__.py");
        List<String> command = new ArrayList<>(List.of(python().toString(), main.toString()));
        command.addAll(List.of(args));
        Result result = run(command, workDir);
        assertEquals(0, result.exit(), "the worker's " + args[0] + " failed:\n" + result.output());
    }

    private record Result(int exit, String output) {}

    private static Result run(List<String> command, Path workDir) {
        try {
            ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
            if (workDir != null) {
                builder.directory(workDir.toFile());
            }
            builder.environment().put("OMP_NUM_THREADS", "1");
            builder.environment().put("HF_HUB_OFFLINE", "1");
            Path log = Files.createTempFile("python-", ".log");
            builder.redirectOutput(log.toFile());
            Process process = builder.start();
            if (!process.waitFor(600, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                return new Result(-1, "timed out\n" + Files.readString(log));
            }
            String output = Files.readString(log, StandardCharsets.UTF_8);
            Files.deleteIfExists(log);
            return new Result(process.exitValue(), output);
        } catch (IOException e) {
            return new Result(-1, e.toString());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return new Result(-1, e.toString());
        }
    }
}
