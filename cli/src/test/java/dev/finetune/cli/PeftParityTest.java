package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Adapters between us and PEFT, through {@code finetune generate --json} in a child JVM and PEFT in the project's
 * venv: the last-position logits of a prompt must agree within 1e-5 with PEFT's, computed both by the forward
 * over the whole prompt and as transformers' {@code generate()} computes them (the head on the last position only,
 * as ours does). Generation computes each op as transformers does, in its order, so the two ways differ only by
 * the head's summation order (a few float spacings of logits near 19, 1.9e-6 each).
 */
class PeftParityTest {
    static final Path MODEL = MainProcessTest.repoRoot().resolve("configs/models/stories260K");
    static final String PROMPT = "1,403,407,261,378,383,286";

    record Run(int exit, String out, String err) {}

    static Run finetune(String... args) throws Exception {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:+UseSerialGC", "-Dai.djl.offline=true", "-Dfinetune.home=" + MainProcessTest.repoRoot(),
                "-cp", System.getProperty("java.class.path"), Main.class.getName()));
        command.addAll(List.of(args));
        Path err = Files.createTempFile("finetune-err", ".txt");
        ProcessBuilder builder = new ProcessBuilder(command).redirectError(err.toFile());
        builder.environment().put("OMP_WAIT_POLICY", "PASSIVE");
        Process process = builder.start();
        String out = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(process.waitFor(240, TimeUnit.SECONDS), "finetune did not finish");
        String error = Files.readString(err);
        Files.delete(err);
        return new Run(process.exitValue(), out, error);
    }

    /** Largest |ours − PEFT's| over the last-position logits, PEFT's loading checked for missing/unexpected keys. */
    static double logitGap(Path adapterDir, Path work) throws Exception {
        return logitGap(adapterDir, work, "logits");
    }

    /** @param mode {@code logits}: an adapter through PEFT; {@code model}: a full model through transformers */
    static double logitGap(Path adapterDir, Path work, String mode) throws Exception {
        Run run = finetune("generate", adapterDir.toString(), "--prompt-ids", PROMPT, "--greedy", "--json",
                "--max-new-tokens", "1");
        assertEquals(0, run.exit(), run.err());
        JsonArray ours = JsonParser.parseString(run.out().trim()).getAsJsonObject().getAsJsonArray("last_logits");
        Path out = work.resolve("peft-" + adapterDir.getFileName() + ".json");
        PythonStack.runScript("/parity/peft_logits.py", work, mode, adapterDir.toString(), PROMPT, out.toString());
        JsonObject peft = JsonParser.parseString(Files.readString(out)).getAsJsonObject();
        assertEquals(0, peft.getAsJsonArray("missing").size(), "PEFT found adapter keys missing: " + peft.get("missing"));
        assertEquals(0, peft.getAsJsonArray("unexpected").size(), "PEFT found unexpected keys: " + peft.get("unexpected"));
        double forward = gap(ours, peft.getAsJsonArray("last_logits"));
        double generate = gap(ours, peft.getAsJsonArray("generate_logits"));
        System.out.printf("%s: max |logit - ours| %.2e against the whole-prompt forward, %.2e against generate()'s%n",
                adapterDir.getFileName(), forward, generate);
        return Math.max(forward, generate);
    }

    /**
     * Ours are float32 printed in their shortest form, so they are read back as floats: read as doubles they would
     * be off from their true values by up to half a float spacing (1e-6 near 19). PEFT's are printed as doubles.
     */
    private static double gap(JsonArray ours, JsonArray theirs) {
        assertEquals(theirs.size(), ours.size());
        double max = 0;
        for (int i = 0; i < ours.size(); i++) {
            max = Math.max(max, Math.abs((double) ours.get(i).getAsFloat() - theirs.get(i).getAsDouble()));
        }
        return max;
    }

    @Test
    @Timeout(600)
    void anAdapterOnSomeLayersOnlyGeneratesAsPeftRunsIt(@TempDir Path work) throws Exception {
        Path adapter = work.resolve("partial");
        PythonStack.runScript("/parity/peft_logits.py", work, "write", MODEL.toString(), adapter.toString(), "1,3");
        double gap = logitGap(adapter, work);
        System.out.printf("layers_to_transform [1, 3]: max |logit - PEFT| %.2e%n", gap);
        assertTrue(gap < 1e-5, "logits differ from PEFT's by " + gap);
    }

    /** {@code exclude_modules}: the adapter covers the projections its saved tensors name, no more. */
    @Test
    @Timeout(600)
    void anAdapterWithExcludedModulesGeneratesAsPeftRunsIt(@TempDir Path work) throws Exception {
        Path adapter = work.resolve("excluded");
        PythonStack.runScript("/parity/peft_logits.py", work, "write", MODEL.toString(), adapter.toString(), "all",
                "model.layers.0.self_attn.q_proj,model.layers.2.self_attn.v_proj");
        double gap = logitGap(adapter, work);
        System.out.printf("exclude_modules: max |logit - PEFT| %.2e%n", gap);
        assertTrue(gap < 1e-5, "logits differ from PEFT's by " + gap);
    }

    /**
     * alpha 6 over r 4 on every linear layer: a scaling that is no power of two rounds differently depending on what
     * it multiplies, so generation must apply it where PEFT does (applied to the rank-r intermediate instead, as
     * training does, these logits were 1.1e-5 from PEFT's).
     */
    @Test
    @Timeout(600)
    void aScalingThatIsNoPowerOfTwoGeneratesAsPeftRunsIt(@TempDir Path work) throws Exception {
        Path adapter = work.resolve("alpha6");
        PythonStack.runScript("/parity/peft_logits.py", work, "write", MODEL.toString(), adapter.toString(), "all", "-",
                "4", "6", "all-linear");
        double gap = logitGap(adapter, work);
        System.out.printf("lora_alpha 6, r 4: max |logit - PEFT| %.2e%n", gap);
        assertTrue(gap < 1e-5, "logits differ from PEFT's by " + gap);
    }

    @Test
    @Timeout(900)
    void everyCheckpointIsAPeftAdapterAndAnHfTrainerState(@TempDir Path work) throws Exception {
        Path run = work.resolve("run");
        Run train = finetune(MainProcessTest.repoRoot().resolve("configs/quickstart.yaml").toString(), "max_steps=4",
                "save_steps=2", "eval_steps=2", "logging_steps=1", "output_dir=" + run);
        assertEquals(0, train.exit(), train.err());
        for (int step : new int[] {2, 4}) {
            Path checkpoint = run.resolve("checkpoint-" + step);
            double gap = logitGap(checkpoint, work);
            System.out.printf("checkpoint-%d: PEFT loads it, max |logit - ours| %.2e%n", step, gap);
            assertTrue(gap < 1e-5, "checkpoint-" + step + ": logits differ from PEFT's by " + gap);
            Path printed = work.resolve("state-" + step + ".txt");
            PythonStack.runScript("/parity/trainer_state.py", work, checkpoint.toString(), printed.toString());
            String[] state = Files.readString(printed).trim().split(" ");
            assertEquals(Integer.toString(step), state[0], "TrainerState.load_from_json: global_step");
            assertTrue(Integer.parseInt(state[1]) >= step, "log_history holds the steps so far: " + state[1]);
        }
        Path merged = work.resolve("merged");
        Run merge = finetune("merge-lora", run.resolve("checkpoint-4").toString(), "--out", merged.toString());
        assertEquals(0, merge.exit(), merge.err());
        assertEquals("rwxr-xr-x", java.nio.file.attribute.PosixFilePermissions.toString(
                Files.getPosixFilePermissions(merged)), "a merged model is for others to read too");
        Run fromMerged = finetune("generate", merged.toString(), "--prompt-ids", PROMPT, "--greedy", "--json",
                "--max-new-tokens", "1");
        Run fromCheckpoint = finetune("generate", run.resolve("checkpoint-4").toString(), "--prompt-ids", PROMPT,
                "--greedy", "--json", "--max-new-tokens", "1");
        JsonArray a = JsonParser.parseString(fromMerged.out().trim()).getAsJsonObject().getAsJsonArray("last_logits");
        JsonArray b = JsonParser.parseString(fromCheckpoint.out().trim()).getAsJsonObject()
                .getAsJsonArray("last_logits");
        for (int i = 0; i < a.size(); i++) {
            assertEquals(b.get(i).getAsDouble(), a.get(i).getAsDouble(), 1e-4, "merged checkpoint-4, logit " + i);
        }
    }
}
