package dev.finetune.trainers.model;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** The prompts of {@code stories260K/reference.json}, produced by llama2.c's own forward pass. */
public record Stories260KReference(long[] promptIds, long[] generatedIds, float[] lastLogits, float[][] promptLogitsFirst8) {

    /** The embedded copy, found from the module directory Maven runs tests in or from the repository root. */
    public static Path modelDir() {
        for (Path candidate : List.of(Path.of("../configs/models/stories260K"), Path.of("configs/models/stories260K"))) {
            if (Files.isDirectory(candidate)) {
                return candidate.toAbsolutePath().normalize();
            }
        }
        throw new IllegalStateException("configs/models/stories260K not found from " + Path.of("").toAbsolutePath());
    }

    public static List<Stories260KReference> load() {
        JsonObject root;
        try {
            root = JsonParser.parseString(Files.readString(modelDir().resolve("reference.json"))).getAsJsonObject();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        List<Stories260KReference> prompts = new ArrayList<>();
        for (JsonElement p : root.getAsJsonArray("prompts")) {
            JsonObject o = p.getAsJsonObject();
            JsonArray first8 = o.getAsJsonArray("prompt_logits_first8");
            float[][] rows = new float[first8.size()][];
            for (int i = 0; i < rows.length; i++) {
                rows[i] = floats(first8.get(i).getAsJsonArray());
            }
            prompts.add(new Stories260KReference(longs(o.getAsJsonArray("prompt_ids")), longs(o.getAsJsonArray("generated_ids")),
                    floats(o.getAsJsonArray("last_logits")), rows));
        }
        return prompts;
    }

    private static long[] longs(JsonArray a) {
        long[] out = new long[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsLong();
        }
        return out;
    }

    private static float[] floats(JsonArray a) {
        float[] out = new float[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsFloat();
        }
        return out;
    }

    public static float maxAbsDiff(float[] a, float[] b) {
        if (a.length != b.length) {
            throw new AssertionError("lengths differ: " + a.length + " vs " + b.length);
        }
        float max = 0;
        for (int i = 0; i < a.length; i++) {
            max = Math.max(max, Math.abs(a[i] - b[i]));
        }
        return max;
    }
}
