package dev.finetune.trainers.families;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import dev.finetune.recipes.model.Family;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The plan's architecture of every family equals what transformers builds: the config.json transformers writes for a
 * tiny random model of each family, read by {@link ModelConfig}, gives {@code num_parameters()} exactly and the very
 * parameter names and shapes of {@code named_parameters()}.
 */
class FamilyShapesTest {
    static JsonObject expected;

    @BeforeAll
    static void buildTinyModels() {
        expected = TinyFamilies.expected();
    }

    @Test
    void everyFamilyCountsAsTransformersDoesTensorByTensor() {
        List<String> problems = new ArrayList<>();
        Set<Family> seen = EnumSet.noneOf(Family.class);
        for (Map.Entry<String, JsonElement> variant : expected.entrySet()) {
            JsonObject facts = variant.getValue().getAsJsonObject();
            ModelConfig config = ModelConfig.read(TinyFamilies.model(variant.getKey()));
            seen.add(config.family());
            ModelParameters p = config.parameters();
            long theirs = facts.get("num_parameters").getAsLong();
            if (p.total() != theirs) {
                problems.add(variant.getKey() + ": plan " + p.total() + " parameters, num_parameters() " + theirs);
            }
            Map<String, List<Long>> transformers = new LinkedHashMap<>();
            for (Map.Entry<String, JsonElement> e : facts.getAsJsonObject("parameters").entrySet()) {
                List<Long> shape = new ArrayList<>();
                e.getValue().getAsJsonArray().forEach(d -> shape.add(d.getAsLong()));
                transformers.put(e.getKey(), shape);
            }
            // named_parameters() lists a tied head once, under the embedding's name, as the plan does
            if (!p.namedShapes().equals(transformers)) {
                problems.add(variant.getKey() + ": plan tensors differ:\n  plan   " + p.namedShapes() + "\n  theirs "
                        + transformers);
            }
            System.out.printf("%-22s %-12s plan %,9d = num_parameters() %,9d%s%n", variant.getKey(), config.modelType(),
                    p.total(), theirs, p.mixtureOfExperts() ? String.format(", %,d active per token", p.active()) : "");
        }
        assertTrue(problems.isEmpty(), String.join("\n", problems));
        assertEquals(EnumSet.allOf(Family.class), seen, "a tiny model of every family");
    }

    @Test
    void slidingWindowLayersAreTheFamilysOwn() {
        // transformers' own layer_types, as saved: Gemma 2 alternates from a sliding first layer, Gemma 3 has one full
        // layer in six, OLMo 3 one in four; Mistral slides everywhere, a Mixtral saved with sliding_window null nowhere
        assertEquals(List.of(true, false), config("gemma2").slidingWindow().layers());
        assertEquals(List.of(true, true, true), config("gemma3").slidingWindow().layers());
        assertEquals(List.of(true, true, true, false), config("olmo3").slidingWindow().layers());
        assertEquals(4, config("mistral").slidingWindow().size());
        assertEquals(List.of(true, true), config("mistral").slidingWindow().layers());
        assertEquals(null, config("mixtral").slidingWindow());
        assertEquals(null, config("qwen2").slidingWindow());
        assertEquals(List.of(true, false, true), config("qwen2_moe").experts().sparseLayers());
        assertEquals(List.of(false, true, true), config("qwen3_moe-dense-layer").experts().sparseLayers());
    }

    private static ModelConfig config(String variant) {
        return ModelConfig.read(TinyFamilies.model(variant));
    }
}
