package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.trainers.backend.SavedModels;
import dev.finetune.trainers.generation.Completion;
import dev.finetune.trainers.generation.GenerationSettings;
import dev.finetune.trainers.generation.Generator;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The torch worker's generation ({@code finetune generate} for the families the in-JVM model does not implement) on
 * stories260K, which both engines run: the reference prompts as one left-padded batch reproduce llama2.c's greedy
 * tokens and last-prompt logits, and with sampling settings (temperature, top-k, top-p, repetition penalty, a seed,
 * an EOS) the worker picks the same tokens, with the same stop reasons, as the in-JVM Generator. Two worker starts.
 * (FamilyTrainingTest compares the worker with PEFT on every family's own model.)
 */
class WorkerGenerationTest {

    @Test
    void theWorkerGeneratesWhatTheJvmAndLlama2cDo() throws Exception {
        Path model = WorkerEnvironment.stories260K();
        JsonArray reference = JsonParser.parseString(Files.readString(model.resolve("reference.json"))).getAsJsonObject()
                .getAsJsonArray("prompts");
        List<long[]> prompts = new ArrayList<>();
        for (JsonElement p : reference) {
            prompts.add(longs(p.getAsJsonObject().getAsJsonArray("prompt_ids")));
        }
        int greedyRows = prompts.size();
        List<Completion> greedy = WorkerGeneration.generate(WorkerEnvironment.python(), model, null, prompts,
                GenerationSettings.greedy(32));
        for (int r = 0; r < greedyRows; r++) {
            JsonObject expected = reference.get(r).getAsJsonObject();
            assertArrayEquals(longs(expected.getAsJsonArray("generated_ids")), greedy.get(r).tokens(), "prompt " + r);
            assertEquals(Completion.Stop.MAX_NEW_TOKENS, greedy.get(r).stop());
            JsonArray logits = expected.getAsJsonArray("last_logits");
            double worst = 0;
            for (int v = 0; v < logits.size(); v++) {
                worst = Math.max(worst, Math.abs(logits.get(v).getAsDouble() - greedy.get(r).lastPromptLogits()[v]));
            }
            assertTrue(worst < 1e-4, "prompt " + r + ": last logits differ from llama2.c's by " + worst);
        }

        GenerationSettings sampled = new GenerationSettings(24, 0.9f, 40, 0.95f, 1234L, Set.of(2L), List.of(), 0f,
                1.1f);
        List<Completion> worker = WorkerGeneration.generate(WorkerEnvironment.python(), model, null, prompts, sampled);
        try (NDManager manager = NDManager.newBaseManager()) {
            List<Completion> jvm = new Generator(SavedModels.load(model, manager)).generate(prompts, sampled);
            for (int r = 0; r < prompts.size(); r++) {
                assertArrayEquals(jvm.get(r).tokens(), worker.get(r).tokens(), "sampled row " + r);
                assertEquals(jvm.get(r).stop(), worker.get(r).stop(), "sampled row " + r);
            }
        }
    }

    private static long[] longs(JsonArray array) {
        long[] out = new long[array.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = array.get(i).getAsLong();
        }
        return out;
    }
}
