package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Jobs for {@code parity/peft_logits.py} (write a PEFT adapter, PEFT's or transformers' logits of a folder, a
 * trainer state), gathered first and then run by one Python process: importing torch, transformers and PEFT costs
 * seconds per process, and a test class needs a dozen such views.
 */
final class HfViews {
    /**
     * How far our logits may be from the HF stack's. Near 19 a float's spacing is 1.9e-6; both stacks compute the
     * same ops in the same order, and what remains is how the CPU's GEMM kernels sum: on CPUs where the JVM's libtorch
     * 2.7.1 and the venv's torch 2.13 pick the same kernel the gap was 0, on an AVX-512 EPYC (this project's CI
     * machines) they differ by up to 1.8e-5 (lora_alpha 6, r 4). A tensor loaded under the wrong name or a scaling
     * left out moves logits by orders more.
     */
    static final double LOGIT_BAR = 3e-5;

    private final List<JsonObject> jobs = new ArrayList<>();
    private List<JsonObject> results;

    /** A seeded LoRA adapter written by PEFT; {@code targets} null for q_proj and v_proj. */
    void write(Path model, Path adapter, String layers, String exclude, int r, int alpha, String targets) {
        JsonObject job = job("write");
        job.addProperty("model", model.toString());
        job.addProperty("adapter", adapter.toString());
        job.addProperty("layers", layers);
        job.addProperty("exclude", exclude);
        job.addProperty("r", r);
        job.addProperty("alpha", alpha);
        job.addProperty("targets", targets);
        jobs.add(job);
    }

    /** PEFT's last-position logits of {@link PeftParityTest#PROMPT} for an adapter folder; a handle to the result. */
    int adapterLogits(Path adapter) {
        return add(folderJob("logits", adapter));
    }

    /** transformers' logits for a full model folder. */
    int modelLogits(Path model) {
        return add(folderJob("model", model));
    }

    /** {@code TrainerState.load_from_json} of a checkpoint: {@code global_step} and {@code log_history} (a count). */
    int trainerState(Path checkpoint) {
        return add(folderJob("state", checkpoint));
    }

    /** Runs every job gathered so far in one Python process (in order), failing the test if it fails. */
    void run(Path work) throws Exception {
        Path in = work.resolve("hf-jobs.json");
        Path out = work.resolve("hf-views.json");
        JsonArray all = new JsonArray();
        jobs.forEach(all::add);
        Files.writeString(in, new Gson().toJson(all));
        PythonStack.runScript("/parity/peft_logits.py", work, in.toString(), out.toString());
        results = new ArrayList<>();
        for (JsonElement result : JsonParser.parseString(Files.readString(out)).getAsJsonArray()) {
            results.add(result.getAsJsonObject());
        }
        assertEquals(jobs.size(), results.size(), "one result per job");
    }

    JsonObject result(int handle) {
        return results.get(handle);
    }

    /**
     * Largest |ours − theirs| over the last-position logits, against both the forward over the whole prompt and the
     * logits as transformers' generate() asks for them, after checking the Hugging Face side loaded every key.
     */
    double logitGap(int handle, JsonArray ours, String what) {
        JsonObject theirs = result(handle);
        assertEquals(0, theirs.getAsJsonArray("missing").size(), what + ": keys missing: " + theirs.get("missing"));
        assertEquals(0, theirs.getAsJsonArray("unexpected").size(), what + ": unexpected keys: "
                + theirs.get("unexpected"));
        double forward = gap(ours, theirs.getAsJsonArray("last_logits"));
        double generate = gap(ours, theirs.getAsJsonArray("generate_logits"));
        System.out.printf("%s: max |logit - ours| %.2e against the whole-prompt forward, %.2e against generate()'s%n",
                what, forward, generate);
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

    private int add(JsonObject job) {
        jobs.add(job);
        return jobs.size() - 1;
    }

    private static JsonObject folderJob(String kind, Path dir) {
        JsonObject job = job(kind);
        job.addProperty("dir", dir.toString());
        if (!kind.equals("state")) {
            job.addProperty("prompt", PeftParityTest.PROMPT);
        }
        return job;
    }

    private static JsonObject job(String kind) {
        JsonObject job = new JsonObject();
        job.addProperty("job", kind);
        return job;
    }
}
