package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.yaml.snakeyaml.DumperOptions;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * "Valid" means "it runs": every Axolotl example recipe that {@code validate} accepts gets the embedded model and
 * small made-up data in the shape its datasets name (and this machine as its hardware), is validated again as such,
 * and trains two steps to exit 0. A recipe that validates and is then refused when the run starts fails the test:
 * whatever the trainer refuses at start, {@code validate} must have said. What the swap itself makes impossible here
 * (an 8-bit optimizer on a CPU) {@code validate} refuses, and the test reports it without failing.
 *
 * <p>Recipes that are identical after the swap run once. Skipped, with the reason, where {@code ../shared} is absent,
 * except under CI ({@code CI=true}), where its absence is a failure.
 */
class AxolotlCorpusRunTest {
    /** The embedded model's context: a recipe's longer sequences are cut to it, with the model swapped in. */
    static final int STORIES_CONTEXT = 512;
    static final int ROWS = 48;

    @Test
    @Timeout(900)
    void everyRecipeValidateAcceptsTrainsTwoSteps(@TempDir Path work) throws IOException {
        Path corpus = MainProcessTest.repoRoot().resolveSibling("shared").resolve("compat/axolotl");
        boolean present = Files.isDirectory(corpus);
        if (!present && "true".equals(System.getenv("CI"))) {
            throw new AssertionError("the Axolotl corpus is missing under CI: " + corpus);
        }
        assumeTrue(present, "the Axolotl corpus (../shared/compat/axolotl) is not beside this clone");
        List<Path> files;
        try (Stream<Path> walk = Files.walk(corpus)) {
            files = walk.filter(p -> p.toString().endsWith(".yaml") || p.toString().endsWith(".yml")).sorted().toList();
        }
        int accepted = 0;
        Set<String> swappedTexts = new LinkedHashSet<>();
        Map<String, String> refusedHere = new LinkedHashMap<>();
        List<String> ran = new ArrayList<>();
        List<String> failed = new ArrayList<>();
        int index = 0;
        for (Path file : files) {
            if (InProcess.finetune("validate", file.toString()).exit() != 0) {
                continue;
            }
            accepted++;
            String name = corpus.relativize(file).toString();
            Path dir = Files.createDirectories(work.resolve("r" + index++));
            String text = swapped(file, dir);
            if (!swappedTexts.add(text.replace(dir.toString(), "DIR"))) {
                continue;
            }
            Path recipe = dir.resolve("recipe.yaml");
            Files.writeString(recipe, text);
            InProcess.Run check = InProcess.finetune("validate", recipe.toString());
            if (check.exit() != 0) {
                refusedHere.put(name, check.err().lines().filter(l -> l.startsWith("error: ")).findFirst().orElse(check.err()));
                continue;
            }
            // the fsdp worker's Python is the machine's to provide (validate says so): here, the test venv's
            InProcess.Run run = check.out().contains(" worker (")
                    ? InProcess.finetune(recipe.toString(), "--python", PythonStack.python().toString())
                    : InProcess.finetune(recipe.toString());
            if (run.exit() == 0) {
                ran.add(name);
            } else {
                failed.add(name + ": exit " + run.exit() + ": " + last(run.err()));
            }
        }
        System.out.printf("axolotl corpus: %d recipes, %d valid; %d distinct after the swap: %d trained 2 steps, "
                + "%d refused by validate on this machine, %d failed at run start%n", files.size(), accepted,
                swappedTexts.size(), ran.size(), refusedHere.size(), failed.size());
        refusedHere.forEach((k, v) -> System.out.println("  refused here " + k + ": " + v));
        failed.forEach(f -> System.out.println("  FAILED " + f));
        assertTrue(failed.isEmpty(), "recipes validate accepted and the run refused:\n" + String.join("\n", failed));
        assertTrue(ran.size() > 0, "no recipe trained");
    }

    private static String last(String text) {
        List<String> lines = text.lines().filter(l -> !l.isBlank()).toList();
        return lines.isEmpty() ? "" : String.join(" | ", lines.subList(Math.max(0, lines.size() - 3), lines.size()));
    }

    /** The recipe with the embedded model, made-up data of its datasets' types, this machine and 2 steps. */
    @SuppressWarnings("unchecked")
    static String swapped(Path file, Path dir) throws IOException {
        Map<String, Object> recipe = new Yaml(new SafeConstructor(new LoaderOptions())).load(Files.readString(file));
        Path stories = MainProcessTest.repoRoot().resolve("configs/models/stories260K");
        recipe.put("base_model", stories.toString());
        // what belongs to the model replaced: its config and tokenizer sources, its special and turn-end tokens
        for (String key : List.of("base_model_config", "tokenizer_config", "special_tokens", "eot_tokens",
                "lora_model_dir", "resume_from_checkpoint", "auto_resume_from_checkpoints", "revision_of_model",
                "model_revision", "model_config", "overrides_of_model_config", "num_epochs", "hub_model_id",
                "deepspeed")) {
            recipe.remove(key);
        }
        if ("tokenizer_default".equals(recipe.get("chat_template"))) {
            recipe.put("chat_template", "chatml"); // the embedded model has no template of its own
        }
        recipe.put("hardware", "cpu");
        recipe.put("max_steps", 2);
        recipe.put("output_dir", dir.resolve("out").toString());
        if (recipe.get("dataset_prepared_path") != null) {
            recipe.put("dataset_prepared_path", dir.resolve("prepared").toString());
        }
        for (String key : List.of("sequence_len", "eval_sequence_len")) {
            if (recipe.get(key) instanceof Number n && n.intValue() > STORIES_CONTEXT) {
                recipe.put(key, STORIES_CONTEXT);
            }
        }
        if (recipe.get("trl") instanceof Map<?, ?> trl && trl.get("max_completion_length") instanceof Number n && n.intValue() > 16) {
            ((Map<String, Object>) trl).put("max_completion_length", 16);
        }
        // a chat dataset without a template means the model's own, which the embedded model does not have
        boolean chat = java.util.stream.Stream.of("datasets", "test_datasets").anyMatch(list -> recipe.get(list)
                instanceof List<?> l && l.stream().anyMatch(d -> d instanceof Map<?, ?> m
                        && String.valueOf(m.get("type")).startsWith("chat_template")));
        if (chat && recipe.get("chat_template") == null && recipe.get("chat_template_jinja") == null) {
            recipe.put("chat_template", "chatml");
        }
        String rl = recipe.get("rl") instanceof String s ? s : "sft";
        int index = 0;
        for (String list : List.of("datasets", "test_datasets")) {
            if (recipe.get(list) instanceof List<?> datasets) {
                for (Object item : datasets) {
                    if (item instanceof Map<?, ?> dataset) {
                        Path data = dir.resolve("data" + index++ + ".jsonl");
                        // a val_set_size given in rows needs those rows besides the ones that train
                        int held = recipe.get("val_set_size") instanceof Number v && v.doubleValue() >= 1 ? v.intValue() : 0;
                        Files.write(data, CorpusRows.rows((Map<String, Object>) dataset, rl, ROWS + held));
                        Map<String, Object> d = (Map<String, Object>) dataset;
                        d.put("path", data.toString());
                        if ("tokenizer_default".equals(d.get("chat_template"))) {
                            d.put("chat_template", "chatml");
                        }
                        for (String source : List.of("name", "split", "data_files", "ds_type", "revision", "shards",
                                "shards_idx", "preprocess_shards")) {
                            d.remove(source);
                        }
                    }
                }
            }
        }
        DumperOptions options = new DumperOptions();
        options.setDefaultFlowStyle(DumperOptions.FlowStyle.BLOCK);
        return new Yaml(options).dump(recipe);
    }
}
