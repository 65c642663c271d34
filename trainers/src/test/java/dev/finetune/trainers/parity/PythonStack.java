package dev.finetune.trainers.parity;

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
 * The project's Python environment ({@code <repo>/.venv}, made by the test build from the pinned requirements)
 * for tests that compare us with the real libraries (transformers, PEFT, TRL). Where it is missing such a test
 * skips, except under {@code CI=true}, where it fails: CI installs the stack, so a missing one is a broken build.
 */
public final class PythonStack {
    private PythonStack() {}

    public static Path repoRoot() {
        Path here = Path.of("").toAbsolutePath();
        for (Path dir = here; dir != null; dir = dir.getParent()) {
            if (Files.isDirectory(dir.resolve("trainers")) && Files.isRegularFile(dir.resolve("pom.xml"))) {
                return dir;
            }
        }
        throw new IllegalStateException("no repository root above " + here);
    }

    /** What {@link #python} found, once per test JVM: the probe alone is a Python start importing all four. */
    private static String problem;
    private static boolean checked;

    /** The venv's interpreter with torch, transformers, peft and trl importable; skips or fails when absent. */
    public static synchronized Path python() {
        Path python = repoRoot().resolve(".venv/bin/python");
        if (!checked) {
            if (!Files.isExecutable(python)) {
                problem = python + " is missing";
            } else {
                Result probe = run(List.of(python.toString(), "-c", "import torch, transformers, peft, trl"), 120);
                if (probe.exit() != 0) {
                    problem = python + " cannot import torch, transformers, peft and trl: " + probe.output();
                }
            }
            checked = true;
        }
        if (problem != null) {
            if ("true".equals(System.getenv("CI"))) {
                fail(problem + " (CI=true: the test build must create it from "
                        + "trainers/src/main/python/requirements.txt)");
            }
            assumeTrue(false, problem);
        }
        return python;
    }

    /** A script from the test resources, copied to {@code dir} so the interpreter can run it. */
    public static Path script(String resource, Path dir) throws IOException {
        Path out = dir.resolve(resource.substring(resource.lastIndexOf('/') + 1));
        try (InputStream in = PythonStack.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new IllegalStateException("no test resource " + resource);
            }
            Files.copy(in, out);
        }
        return out;
    }

    public record Result(int exit, String output) {}

    /** Runs {@code python script args...}; fails the test with its output unless it exits 0. */
    public static String runScript(Path script, Path workDir, String... args) {
        List<String> command = new ArrayList<>(List.of(python().toString(), script.toString()));
        command.addAll(List.of(args));
        Result result = run(command, 900, workDir);
        assertEquals(0, result.exit(), "python " + script.getFileName() + " failed:\n" + result.output());
        return result.output();
    }

    private static Result run(List<String> command, long seconds) {
        return run(command, seconds, null);
    }

    private static Result run(List<String> command, long seconds, Path workDir) {
        try {
            ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
            if (workDir != null) {
                builder.directory(workDir.toFile());
            }
            // the tests share two cores with the JVM; one thread each keeps the run predictable
            builder.environment().put("OMP_NUM_THREADS", "1");
            builder.environment().put("HF_HUB_OFFLINE", "1");
            builder.environment().put("TRANSFORMERS_OFFLINE", "1");
            builder.environment().put("HF_DATASETS_OFFLINE", "1");
            Path log = Files.createTempFile("python-", ".log");
            builder.redirectOutput(log.toFile());
            Process process = builder.start();
            if (!process.waitFor(seconds, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                return new Result(-1, "timed out after " + seconds + " s\n" + Files.readString(log));
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
