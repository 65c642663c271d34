package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A key's default lives in {@code recipe-keys.tsv} only: a minimal recipe of each objective reads exactly as the same
 * recipe with every defaulted key written out at its table default (for that objective where the default depends on
 * it). A reader that falls back to a literal of its own, different from the table's, fails here.
 */
class TableDefaultsTest {

    static final Path CONFIGS = RecipeLoadingTest.repoRoot().resolve("configs");

    /** The smallest valid LoRA recipe of each objective, on the shipped model and data. */
    static final Map<String, String> MINIMAL = Map.of(
            "sft", """
                    base_model: %s/models/stories260K
                    datasets:
                      - path: %s/data/quickstart.jsonl
                        type: completion
                    %%s
                    micro_batch_size: 1
                    gradient_accumulation_steps: 1
                    learning_rate: 1e-3
                    adapter: lora
                    lora_r: 8
                    lora_alpha: 16
                    lora_target_linear: true
                    %%s
                    """,
            "dpo", """
                    base_model: %s/models/stories260K
                    rl: dpo
                    datasets:
                      - path: %s/data/quickstart-dpo.jsonl
                        type: passthrough
                    %%s
                    micro_batch_size: 1
                    gradient_accumulation_steps: 1
                    learning_rate: 1e-3
                    adapter: lora
                    lora_r: 8
                    lora_alpha: 16
                    lora_target_linear: true
                    %%s
                    """,
            "grpo", """
                    base_model: %s/models/stories260K
                    rl: grpo
                    datasets:
                      - path: %s/data/quickstart-grpo.jsonl
                        type: passthrough
                    %%s
                    micro_batch_size: 8
                    gradient_accumulation_steps: 1
                    learning_rate: 1e-3
                    adapter: lora
                    lora_r: 8
                    lora_alpha: 16
                    lora_target_linear: true
                    %%s
                    """);

    /** Sections whose keys only apply once the section is written; the base recipe then writes it empty. */
    static final List<String> SECTIONS = List.of("hardware", "fsdp_config", "bnb_config_kwargs", "trl");

    @Test
    void aMinimalRecipeOfEachObjectiveReadsAsTheTablesDefaults(@TempDir Path dir) throws IOException {
        int checked = 0;
        List<String> mismatches = new ArrayList<>();
        for (Map.Entry<String, String> objective : MINIMAL.entrySet()) {
            String template = objective.getValue().formatted(CONFIGS, CONFIGS);
            for (RecipeKeys.Key key : RecipeKeys.all()) {
                String value = key.defaultFor(objective.getKey());
                if (key.status() != RecipeKeys.Status.SUPPORTED || value.isEmpty()) {
                    continue;
                }
                String name = key.name();
                if (template.contains("\n" + name + ":")) {
                    continue; // the minimal recipe writes it already (the batch keys: two of three must be given)
                }
                String datasetLine = "";
                String topLines = "";
                String section = name.contains(".") ? name.substring(0, name.indexOf('.')) : null;
                if (name.startsWith("datasets[].")) {
                    datasetLine = "    " + name.substring("datasets[].".length()) + ": " + value;
                } else if (section != null) {
                    assertTrue(SECTIONS.contains(section), name + ": a nested key of a section this test does not know");
                    topLines = section + ": {" + name.substring(section.length() + 1) + ": " + value + "}";
                } else {
                    topLines = name + ": " + value;
                }
                String sectionLine = section != null && !name.startsWith("datasets[].") && !section.equals("trl")
                        ? section + ": {}" : "";
                Recipe written = read(dir, template.formatted(datasetLine, topLines));
                Recipe omitted = read(dir, template.formatted("", sectionLine));
                if (!written.equals(omitted)) {
                    mismatches.add(objective.getKey() + ": " + name + ": " + value + " in the table, but leaving it out "
                            + "reads differently:\n  omitted " + omitted + "\n  written " + written);
                }
                checked++;
            }
        }
        assertEquals(List.of(), mismatches);
        assertTrue(checked > 150, checked + " keys checked");
    }

    /** TRL's defaults differ by objective; the table says so, and each objective reads its own. */
    @Test
    void rlBetaDefaultsToTrlsValueForEachObjective(@TempDir Path dir) throws IOException {
        Recipe dpo = read(dir, MINIMAL.get("dpo").formatted(CONFIGS, CONFIGS).formatted("", ""));
        Recipe grpo = read(dir, MINIMAL.get("grpo").formatted(CONFIGS, CONFIGS).formatted("", ""));
        assertEquals(0.1, ((Recipe.Objective.Dpo) dpo.objective()).beta());
        assertEquals(0.0, ((Recipe.Objective.Grpo) grpo.objective()).beta());
        assertEquals("0.1", RecipeKeys.get("rl_beta").defaultFor("dpo"));
        assertEquals("0.0", RecipeKeys.get("rl_beta").defaultFor("grpo"));
    }

    private static Recipe read(Path dir, String yaml) throws IOException {
        Path file = dir.resolve("minimal.yaml");
        String text = yaml.contains("rl: grpo") ? yaml.replace("trl: {", "trl: {reward_funcs: [{name: contains, "
                + "field: word}], ") : yaml;
        if (yaml.contains("rl: grpo") && !text.contains("reward_funcs")) {
            text = text + "trl: {reward_funcs: [{name: contains, field: word}]}\n";
        }
        Files.writeString(file, text);
        return ValidatedRecipe.load(file, List.of()).recipe();
    }
}
