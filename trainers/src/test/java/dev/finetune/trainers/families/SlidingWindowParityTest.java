package dev.finetune.trainers.families;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import dev.finetune.trainers.generation.Completion;
import dev.finetune.trainers.generation.GenerationSettings;
import dev.finetune.trainers.generation.Generator;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Mistral's sliding window in the in-JVM trainer: with a window of 4 keys over 14-token sequences, the logits are
 * transformers' (eager attention, its own sliding-window mask) within 1e-4, generation through the KV cache gives its
 * greedy tokens, and packed segments still never see each other.
 */
class SlidingWindowParityTest {
    static final long[] IDS = {1, 17, 42, 5, 60, 3, 33, 9, 100, 250, 7, 400, 12, 64};

    @Test
    void mistralWithAWindowShorterThanTheSequenceIsTransformers(@TempDir Path work) throws IOException {
        Path model = TinyFamilies.model("mistral");
        JsonObject logits = new JsonObject();
        logits.addProperty("kind", "logits");
        logits.addProperty("model", model.toString());
        logits.add("ids", ids(IDS));
        JsonObject generate = new JsonObject();
        generate.addProperty("kind", "generate");
        generate.addProperty("model", model.toString());
        generate.add("ids", ids(new long[] {1, 17, 42}));
        generate.addProperty("new_tokens", 12);
        JsonArray theirs = TinyFamilies.views(List.of(logits, generate), work);
        JsonArray expected = theirs.get(0).getAsJsonObject().getAsJsonArray("logits");

        try (NDManager manager = NDManager.newBaseManager()) {
            LlamaModel jvm = LlamaModel.load(model, manager, LoadOptions.inference());
            assertTrue(jvm.config().slidingWindow().size() < IDS.length, "the window must bind");
            NDArray ours = forward(jvm, manager, IDS);
            double max = 0;
            double scale = 0;
            for (int t = 0; t < IDS.length; t++) {
                float[] row = ours.get(new NDIndex("0, {}, :", t)).toFloatArray();
                JsonArray reference = expected.get(t).getAsJsonArray();
                for (int v = 0; v < row.length; v++) {
                    max = Math.max(max, Math.abs(row[v] - reference.get(v).getAsDouble()));
                    scale = Math.max(scale, Math.abs(reference.get(v).getAsDouble()));
                }
            }
            System.out.printf("mistral, window 4 over 14 tokens: max |JVM - transformers| logit = %.2e (scale %.2f)%n", max, scale);
            assertTrue(scale > 0.5, "logits too small to tell windows apart: " + scale);
            assertTrue(max < 1e-4, "max |logit diff| " + max);
            // and the window matters: the same weights attending to the whole prefix are far from transformers'
            Path unwindowed = Files.createDirectories(work.resolve("unwindowed"));
            for (String file : List.of("model.safetensors", "config.json")) {
                Files.copy(model.resolve(file), unwindowed.resolve(file));
            }
            Files.writeString(unwindowed.resolve("config.json"),
                    Files.readString(unwindowed.resolve("config.json")).replace("\"sliding_window\": 4", "\"sliding_window\": null"));
            float[] last = forward(LlamaModel.load(unwindowed, manager, LoadOptions.inference()), manager, IDS)
                    .get(new NDIndex("0, -1, :")).toFloatArray();
            JsonArray lastReference = expected.get(IDS.length - 1).getAsJsonArray();
            double moved = 0;
            for (int v = 0; v < last.length; v++) {
                moved = Math.max(moved, Math.abs(last[v] - lastReference.get(v).getAsDouble()));
            }
            assertTrue(moved > 1e-2, "without the window the last logits differ by only " + moved);

            long[] tokens = new Generator(jvm).generate(List.of(new long[] {1, 17, 42}), GenerationSettings.greedy(12))
                    .get(0).tokens();
            long[] reference = theirs.get(1).getAsJsonObject().getAsJsonArray("tokens").asList().stream()
                    .mapToLong(e -> e.getAsLong()).toArray();
            assertArrayEquals(reference, tokens, "greedy tokens through the KV cache, past the window");

            // two sequences packed in one row compute what each computes alone
            long[] a = {1, 17, 42, 5, 60, 3, 33};
            long[] b = {9, 100, 250, 7, 400, 12};
            long[] packed = new long[a.length + b.length];
            long[] positions = new long[packed.length];
            long[] segments = new long[packed.length];
            for (int i = 0; i < packed.length; i++) {
                boolean first = i < a.length;
                packed[i] = first ? a[i] : b[i - a.length];
                positions[i] = first ? i : i - a.length;
                segments[i] = first ? 1 : 2;
            }
            NDArray together = jvm.forward(manager.create(packed).expandDims(0), manager.create(positions).expandDims(0),
                    manager.create(segments).expandDims(0));
            NDArray alone = forward(jvm, manager, b);
            for (int t = 0; t < b.length; t++) {
                assertArrayEquals(alone.get(new NDIndex("0, {}, :", t)).toFloatArray(),
                        together.get(new NDIndex("0, {}, :", a.length + t)).toFloatArray(), 1e-5f, "segment 2, position " + t);
            }
        }
    }

    private static NDArray forward(LlamaModel model, NDManager manager, long[] ids) {
        long[] positions = new long[ids.length];
        for (int i = 0; i < ids.length; i++) {
            positions[i] = i;
        }
        return model.forward(manager.create(ids).expandDims(0), manager.create(positions).expandDims(0), null);
    }

    private static JsonArray ids(long[] ids) {
        JsonArray array = new JsonArray();
        for (long id : ids) {
            array.add(id);
        }
        return array;
    }
}
