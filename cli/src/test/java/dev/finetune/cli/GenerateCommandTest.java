package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** {@code finetune generate} as a user runs it: a separate JVM, real files, exit codes and stdout. */
class GenerateCommandTest {
    private static final Path MODEL = Path.of("../configs/models/stories260K").toAbsolutePath().normalize();

    record Run(int exitCode, String stdout, String stderr) {}

    /** All reference prompts in one run: they go through the generator as one left-padded batch. */
    @Test
    void greedyJsonReproducesLlama2cForEveryReferencePrompt() throws Exception {
        JsonObject reference = JsonParser.parseString(Files.readString(MODEL.resolve("reference.json"))).getAsJsonObject();
        JsonArray prompts = reference.getAsJsonArray("prompts");
        List<String> args = new ArrayList<>(List.of("generate", MODEL.toString(), "--greedy", "--json", "--max-new-tokens", "32"));
        for (JsonElement p : prompts) {
            List<String> ids = new ArrayList<>();
            p.getAsJsonObject().getAsJsonArray("prompt_ids").forEach(id -> ids.add(id.getAsString()));
            args.addAll(List.of("--prompt-ids", String.join(",", ids)));
        }
        Run run = finetune(args.toArray(String[]::new));
        assertEquals(0, run.exitCode(), run.stderr());
        String[] lines = run.stdout().trim().split("\n");
        assertEquals(prompts.size(), lines.length, run.stdout());
        for (int i = 0; i < lines.length; i++) {
            JsonObject prompt = prompts.get(i).getAsJsonObject();
            JsonObject out = JsonParser.parseString(lines[i]).getAsJsonObject();
            assertArrayEquals(longs(prompt.getAsJsonArray("prompt_ids")), longs(out.getAsJsonArray("prompt_ids")));
            assertArrayEquals(longs(prompt.getAsJsonArray("generated_ids")), longs(out.getAsJsonArray("generated_ids")));
            double[] expected = doubles(prompt.getAsJsonArray("last_logits"));
            double[] actual = doubles(out.getAsJsonArray("last_logits"));
            assertEquals(expected.length, actual.length);
            double max = 0;
            for (int v = 0; v < expected.length; v++) {
                max = Math.max(max, Math.abs(expected[v] - actual[v]));
            }
            assertTrue(max < 1e-4, "prompt " + i + ": last logits differ by " + max);
        }
    }

    @Test
    void textPromptIsTokenizedAndTheContinuationDecoded() throws Exception {
        JsonObject first = JsonParser.parseString(Files.readString(MODEL.resolve("reference.json"))).getAsJsonObject()
                .getAsJsonArray("prompts").get(0).getAsJsonObject();
        Run run = finetune("generate", MODEL.toString(), "--prompt", first.get("prompt_text").getAsString(), "--greedy", "--json",
                "--max-new-tokens", "32");
        assertEquals(0, run.exitCode(), run.stderr());
        JsonObject out = JsonParser.parseString(run.stdout().trim()).getAsJsonObject();
        assertArrayEquals(longs(first.getAsJsonArray("prompt_ids")), longs(out.getAsJsonArray("prompt_ids")));
        assertArrayEquals(longs(first.getAsJsonArray("generated_ids")), longs(out.getAsJsonArray("generated_ids")));
        assertEquals(first.get("full_text").getAsString(), out.get("text").getAsString());
    }

    @Test
    void badInputExitsWithTwoAndOneLine() throws Exception {
        Run badIds = finetune("generate", MODEL.toString(), "--prompt-ids", "1,x");
        assertEquals(2, badIds.exitCode());
        assertTrue(badIds.stderr().contains("--prompt-ids: 'x' (item 2) is not a token id"), badIds.stderr());
        Run missing = finetune("generate", MODEL.resolve("absent").toString(), "--prompt-ids", "1");
        assertEquals(2, missing.exitCode());
        assertTrue(missing.stderr().contains("model directory not found"), missing.stderr());
        Run outOfVocabulary = finetune("generate", MODEL.toString(), "--prompt-ids", "1,512");
        assertEquals(2, outOfVocabulary.exitCode());
        assertTrue(outOfVocabulary.stderr().contains("token id 512 is outside the vocabulary"), outOfVocabulary.stderr());
        assertTrue(!outOfVocabulary.stderr().contains("\tat "), "no stack trace for bad input: " + outOfVocabulary.stderr());
    }

    /**
     * Families the in-JVM model does not implement go to the torch worker, and the line on stderr says so; what the
     * worker would need is checked before it starts (here: a config.json without weights is bad input, exit 2).
     * FamilyTrainingTest runs the worker's generation on real models of every family against PEFT.
     */
    @Test
    void aFamilyTheJvmDoesNotRunGoesToTheTorchWorker(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
            throws Exception {
        Files.writeString(dir.resolve("config.json"), """
                {"model_type": "gemma2", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 512}""");
        Run gemma = finetune("generate", dir.toString(), "--prompt-ids", "1,2");
        assertEquals(2, gemma.exitCode(), gemma.stderr());
        assertTrue(gemma.stderr().contains("run: generate with the torch worker") && gemma.stderr().contains("not gemma2")
                && gemma.stderr().contains("no model.safetensors"), gemma.stderr());
        assertTrue(!gemma.stderr().contains("\tat "), gemma.stderr());
    }

    private static Run finetune(String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:+UseSerialGC", "-Dai.djl.offline=true", "-cp", System.getProperty("java.class.path"), Main.class.getName()));
        command.addAll(List.of(args));
        ProcessBuilder builder = new ProcessBuilder(command);
        builder.environment().put("OMP_WAIT_POLICY", "PASSIVE");
        Path stderr = Files.createTempFile("finetune-stderr", ".txt");
        builder.redirectError(stderr.toFile());
        Process process = builder.start();
        String stdout = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!process.waitFor(60, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            throw new AssertionError("finetune did not finish within 60 s");
        }
        String err = Files.readString(stderr);
        Files.delete(stderr);
        return new Run(process.exitValue(), stdout, err);
    }

    private static long[] longs(JsonArray a) {
        long[] out = new long[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsLong();
        }
        return out;
    }

    private static double[] doubles(JsonArray a) {
        double[] out = new double[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsDouble();
        }
        return out;
    }
}
