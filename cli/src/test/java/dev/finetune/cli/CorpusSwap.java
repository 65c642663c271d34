package dev.finetune.cli;

import dev.finetune.recipes.Optimizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.yaml.snakeyaml.DumperOptions;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * An Axolotl example recipe made runnable here: what names the hub model, the hub data and the recipe's machine is
 * replaced by a small local model, made-up rows of its datasets' types ({@link CorpusRows}) and this CPU, so that
 * whatever else the recipe says is what runs. Shared by the corpus runs on the embedded Llama
 * ({@link AxolotlCorpusRunTest}) and on a tiny model of each recipe's own family ({@link AxolotlFamiliesRunTest}).
 */
final class CorpusSwap {
    static final int ROWS = 48;

    private CorpusSwap() {}

    /** A swapped recipe after {@link #cpuEquivalents}, and what it replaced ("adapter: qlora → lora", ...). */
    record OnCpu(String text, List<String> replaced) {}

    /**
     * The recipe with {@code model} (a local folder with its tokenizer), made-up data of its datasets' types, this
     * machine and 2 steps; sequences longer than {@code context}, the model's, are cut to it.
     */
    @SuppressWarnings("unchecked")
    static String swapped(Path file, Path dir, Path model, int context) throws IOException {
        Map<String, Object> recipe = new Yaml(new SafeConstructor(new LoaderOptions())).load(Files.readString(file));
        recipe.put("base_model", model.toString());
        // what belongs to the model replaced: its config and tokenizer sources, its special and turn-end tokens
        for (String key : List.of("base_model_config", "tokenizer_config", "special_tokens", "eot_tokens",
                "lora_model_dir", "resume_from_checkpoint", "auto_resume_from_checkpoints", "revision_of_model",
                "model_revision", "model_config", "overrides_of_model_config", "num_epochs", "hub_model_id",
                "deepspeed")) {
            recipe.remove(key);
        }
        if ("tokenizer_default".equals(recipe.get("chat_template"))) {
            recipe.put("chat_template", "chatml"); // the stand-in model has no template of its own
        }
        recipe.put("hardware", "cpu");
        recipe.put("max_steps", 2);
        recipe.put("output_dir", dir.resolve("out").toString());
        if (recipe.get("dataset_prepared_path") != null) {
            recipe.put("dataset_prepared_path", dir.resolve("prepared").toString());
        }
        for (String key : List.of("sequence_len", "eval_sequence_len")) {
            if (recipe.get(key) instanceof Number n && n.intValue() > context) {
                recipe.put(key, context);
            }
        }
        if (recipe.get("trl") instanceof Map<?, ?> trl && trl.get("max_completion_length") instanceof Number n && n.intValue() > 16) {
            ((Map<String, Object>) trl).put("max_completion_length", 16);
        }
        // a chat dataset without a template means the model's own, which the stand-in model does not have
        boolean chat = Stream.of("datasets", "test_datasets").anyMatch(list -> recipe.get(list)
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
        return dump(recipe);
    }

    /**
     * The swapped recipe {@code text} with what only CUDA and bitsandbytes run replaced by its nearest CPU
     * equivalent, for the {@code refused} keys only (those validate refused on this CPU, for a recipe it accepts on
     * one GPU): {@code adapter: qlora} (bitsandbytes' NF4 on the worker) becomes {@code lora} with the same rank,
     * alpha and targets, without the 4-bit loading keys; an 8-bit or paged AdamW (bitsandbytes' state) becomes
     * {@code adamw_torch}, the 32-bit update they approximate. Anything else stays as written, so validate still
     * refuses it and says why. Where the JVM trainer runs the recipe, its QLoRA (its own NF4) is not refused and
     * stays.
     */
    @SuppressWarnings("unchecked")
    static OnCpu cpuEquivalents(String text, Collection<String> refused) {
        Map<String, Object> recipe = new Yaml(new SafeConstructor(new LoaderOptions())).load(text);
        List<String> replaced = new ArrayList<>();
        if (refused.contains("adapter") && "qlora".equals(recipe.get("adapter"))) {
            recipe.put("adapter", "lora");
            // the 4-bit base is what made it QLoRA; lora_r, lora_alpha and the targets are kept as written
            recipe.keySet().removeIf(k -> k.equals("load_in_4bit") || k.equals("bnb_config_kwargs")
                    || k.startsWith("bnb_4bit_"));
            replaced.add("QLoRA→LoRA");
        }
        Object optimizer = recipe.get("optimizer");
        if (refused.contains("optimizer") && optimizer instanceof String name) {
            Optimizer o = Optimizer.byName(name);
            if (o != null && o.bitsAndBytes()) {
                recipe.put("optimizer", "adamw_torch");
                replaced.add(name + "→adamw_torch");
            }
        }
        return new OnCpu(dump(recipe), List.copyOf(replaced));
    }

    private static String dump(Map<String, Object> recipe) {
        DumperOptions options = new DumperOptions();
        options.setDefaultFlowStyle(DumperOptions.FlowStyle.BLOCK);
        return new Yaml(options).dump(recipe);
    }
}
