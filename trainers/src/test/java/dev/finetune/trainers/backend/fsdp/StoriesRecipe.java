package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.ValidatedRecipe;
import java.io.IOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The small recipes the worker tests train on both trainers: stories260K with SFT on the quickstart's stories or DPO
 * on its preference pairs, 128-token rows, micro batches of 2 accumulated twice, cosine after 2 warm-up steps, seed 7,
 * on the CPU. Written once so that each test states only what it is about (steps, learning rate, eval and save
 * points, the adapter), and a change to the common shape reaches every comparison alike.
 *
 * <p>Values are kept as YAML text exactly as a recipe file writes them ({@code 3e-3} stays a string the recipe
 * reader parses, as in a user's file); {@link #set} replaces a key in place or adds it.
 */
final class StoriesRecipe {
    private final Map<String, String> keys = new LinkedHashMap<>();

    private StoriesRecipe() {}

    /** SFT on {@code quickstart.jsonl} (raw text, packed), 5 % held out. */
    static StoriesRecipe sft() {
        return new StoriesRecipe()
                .set("base_model", WorkerEnvironment.stories260K())
                .set("datasets", "\n  - path: " + WorkerEnvironment.data("quickstart.jsonl") + "\n    type: completion")
                .set("val_set_size", "0.05")
                .set("sequence_len", 128)
                .set("sample_packing", true)
                .shape();
    }

    /** DPO ({@code rl_beta} 0.1) on {@code quickstart-dpo.jsonl}, 20 % held out, learning rate 1e-3. */
    static StoriesRecipe dpo() {
        return new StoriesRecipe()
                .set("base_model", WorkerEnvironment.stories260K())
                .set("rl", "dpo")
                .set("rl_beta", "0.1")
                .set("datasets", "\n  - path: " + WorkerEnvironment.data("quickstart-dpo.jsonl")
                        + "\n    type: passthrough")
                .set("val_set_size", "0.2")
                .set("sequence_len", 128)
                .shape()
                .set("learning_rate", "1e-3");
    }

    /** The batch, schedule, seed and device both objectives share. */
    private StoriesRecipe shape() {
        return set("micro_batch_size", 2)
                .set("gradient_accumulation_steps", 2)
                .set("lr_scheduler", "cosine")
                .set("warmup_steps", 2)
                .set("seed", 7)
                .set("hardware", "cpu");
    }

    /** LoRA as the equivalence tests train it: rank 8 on every linear, no dropout (dropout draws differ by trainer). */
    StoriesRecipe lora() {
        return set("adapter", "lora")
                .set("lora_r", 8)
                .set("lora_alpha", 16)
                .set("lora_dropout", "0.0")
                .set("lora_target_linear", true);
    }

    /** {@code key: value}, in place when the key is there already. */
    StoriesRecipe set(String key, Object value) {
        keys.put(key, String.valueOf(value));
        return this;
    }

    /** The recipe file's text, training into {@code outputDir}. */
    String yaml(Path outputDir) {
        StringBuilder text = new StringBuilder();
        keys.forEach((key, value) -> text.append(key).append(':').append(value.startsWith("\n") ? "" : " ")
                .append(value).append('\n'));
        return text.append("output_dir: ").append(outputDir).append('\n').toString();
    }

    /** The recipe written as {@code dir/name.yaml}, training into {@code dir/name}, loaded with overrides. */
    ValidatedRecipe load(Path dir, String name, String... overrides) throws IOException {
        return FsdpRuns.recipe(dir, name, yaml(dir.resolve(name)), overrides);
    }
}
