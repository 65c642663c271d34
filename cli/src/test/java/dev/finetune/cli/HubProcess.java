package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * finetune and the venv's Python in child processes with a Hugging Face environment of their own (the stand-in
 * hub's HF_ENDPOINT, a cache folder per test): the surefire JVM's own HF_HUB_OFFLINE and HF_HOME are not passed on.
 */
final class HubProcess {
    record Run(int exit, String out, String err) {
        String all() {
            return out + err;
        }
    }

    private HubProcess() {}

    /** HF_HOME and HF_ENDPOINT for a child, online. */
    static Map<String, String> env(Path hfHome, String endpoint) {
        Map<String, String> env = new HashMap<>();
        env.put("HF_HOME", hfHome.toString());
        env.put("HF_HUB_CACHE", hfHome.resolve("hub").toString());
        env.put("HF_ENDPOINT", endpoint);
        env.put("HF_HUB_DISABLE_TELEMETRY", "1");
        env.put("HF_HUB_DISABLE_XET", "1");
        env.put("HF_DATASETS_CACHE", hfHome.resolve("datasets").toString());
        return env;
    }

    static ProcessBuilder finetuneBuilder(Path workDir, Map<String, String> env, String... args) {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dai.djl.offline=true",
                "-Dfinetune.home=" + MainProcessTest.repoRoot(), "-cp", System.getProperty("java.class.path"),
                Main.class.getName()));
        command.addAll(List.of(args));
        return builder(command, workDir, env);
    }

    static Run finetune(Path workDir, Map<String, String> env, String... args) throws IOException, InterruptedException {
        return run(finetuneBuilder(workDir, env, args), 600);
    }

    /** The venv's Python running {@code code}. */
    static Run python(Path workDir, Map<String, String> env, String code) throws IOException, InterruptedException {
        List<String> command = List.of(PythonStack.python().toString(), "-c", code);
        ProcessBuilder b = builder(command, workDir, env);
        b.environment().put("OMP_NUM_THREADS", "1");
        return run(b, 600);
    }

    static Run pythonOk(Path workDir, Map<String, String> env, String code) throws IOException, InterruptedException {
        Run r = python(workDir, env, code);
        assertEquals(0, r.exit(), r.all());
        return r;
    }

    private static ProcessBuilder builder(List<String> command, Path workDir, Map<String, String> env) {
        ProcessBuilder b = new ProcessBuilder(command).directory(workDir.toFile());
        for (String k : List.of("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME",
                "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT",
                "HF_TOKEN_PATH", "XDG_CACHE_HOME")) {
            b.environment().remove(k);
        }
        b.environment().putAll(env);
        return b;
    }

    private static Run run(ProcessBuilder b, long seconds) throws IOException, InterruptedException {
        Path out = Files.createTempFile("hub-out", ".txt");
        Path err = Files.createTempFile("hub-err", ".txt");
        try {
            Process p = b.redirectOutput(out.toFile()).redirectError(err.toFile()).start();
            if (!p.waitFor(seconds, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new AssertionError("timed out: " + b.command() + "\n" + Files.readString(err));
            }
            return new Run(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
        } finally {
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
        }
    }

    /** Exit 2 with one {@code error:} line holding every fragment (progress log lines may precede it), no trace. */
    static void assertOneLineError(Run r, String... fragments) {
        assertEquals(2, r.exit(), r.all());
        List<String> errors = r.err().lines().filter(l -> l.startsWith("error: ")).toList();
        assertEquals(1, errors.size(), r.all());
        assertTrue(!r.err().contains("\tat "), "a stack trace:\n" + r.err());
        for (String f : fragments) {
            assertTrue(errors.get(0).contains(f), "'" + f + "' missing from:\n" + r.err());
        }
    }
}
