package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.RecipeKeys.Key;
import dev.finetune.recipes.RecipeKeys.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.yaml.snakeyaml.Yaml;

class RecipeKeysTest {

    @Test
    void everyKeyHasATypeAStatusAndANoteAndRenamesPointAtKnownKeys() {
        assertTrue(RecipeKeys.all().size() > 550, "the table covers " + RecipeKeys.all().size() + " keys");
        for (Key k : RecipeKeys.all()) {
            assertTrue(!k.type().isEmpty() && !k.note().isEmpty(), k.toString());
            if (k.status() == Status.RENAMED) {
                assertNotNull(RecipeKeys.get(k.target()), k + " renames to an unknown key");
            }
        }
        assertEquals(Status.SUPPORTED, RecipeKeys.get("micro_batch_size").status());
        assertEquals(Status.IGNORED, RecipeKeys.get("wandb_project").status());
        assertEquals(Status.UNSUPPORTED, RecipeKeys.get("deepspeed").status());
        assertTrue(RecipeKeys.get("deepspeed").note().contains("fsdp_version: 2"));
    }

    /** A recipe holding every supported key at once: each must be read exactly once, whatever the verdict. */
    @Test
    @SuppressWarnings("unchecked")
    void everySupportedKeyIsReadExactlyOnce(@TempDir Path tmp) throws IOException {
        Map<String, Object> recipe = new LinkedHashMap<>();
        Map<String, Object> dataset = new LinkedHashMap<>();
        int count = 0;
        for (Key k : RecipeKeys.all()) {
            if (k.status() != Status.SUPPORTED || k.name().equals("base")) {
                continue;
            }
            count++;
            Object value = sample(k);
            if (k.name().startsWith("datasets[].")) {
                dataset.put(k.name().substring("datasets[].".length()), value);
            } else if (k.name().contains(".")) {
                String parent = k.name().substring(0, k.name().indexOf('.'));
                Object block = recipe.get(parent);
                if (!(block instanceof Map)) {
                    block = new LinkedHashMap<String, Object>();
                    recipe.put(parent, block);
                }
                ((Map<String, Object>) block).put(k.name().substring(parent.length() + 1), value);
            } else if (!recipe.containsKey(k.name())) {
                recipe.put(k.name(), value);
            }
        }
        recipe.put("datasets", List.of(dataset));
        recipe.put("test_datasets", List.of(dataset));
        Path file = tmp.resolve("all.yaml");
        Files.writeString(file, new Yaml().dump(recipe));
        List<String> errors = new ArrayList<>();
        try {
            ValidatedRecipe.load(file, List.of());
        } catch (InvalidRecipe e) {
            e.errors().forEach(f -> errors.add(f.message()));
        }
        // Conflicting values are expected to be rejected; an unread or twice-read key would have thrown instead.
        assertTrue(errors.stream().noneMatch(m -> m.startsWith("unknown key")), errors.toString());
        assertTrue(count > 140, "supported keys: " + count);
    }

    private static Object sample(Key k) {
        return switch (k.type()) {
            case "bool" -> Boolean.FALSE;
            case "int" -> 1;
            case "number" -> 0.5;
            case "bool|auto" -> "auto";
            case "list", "list|string" -> new ArrayList<>(List.of("a"));
            case "map", "map|string", "string|map" -> new LinkedHashMap<>();
            default -> "x";
        };
    }
}
