package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.RecipeKeys.Key;
import dev.finetune.recipes.RecipeKeys.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The key table tells the truth about every key's fate. A key marked supported is carried into the {@link Recipe}
 * (setting it changes the resolved recipe) or its value is refused or warned about; it is never read and dropped.
 * A key marked ignored never reaches the recipe and is named by no code outside the key table, so nothing that
 * trains can act on it.
 */
class KeyFatesTest {

    /** Supported keys whose every accepted value trains the same, with why: validated, deliberately not stored. */
    static final Map<String, String> VALIDATED_ONLY = Map.ofEntries(
            Map.entry("gradient_checkpointing_kwargs.use_reentrant", "reentrant or not, checkpointing recomputes the same"),
            Map.entry("fsdp_config.sync_module_states", "FSDP2 loads every rank's weights from the same files"),
            Map.entry("fsdp_config.use_orig_params", "FSDP2 always trains the original parameters"),
            Map.entry("model_type", "only causal LM classes are accepted, and they all train the same"),
            Map.entry("type_of_model", "as model_type"),
            Map.entry("plugins", "only plugins that change speed alone are accepted"),
            Map.entry("liger_cross_entropy", "the LM head is always applied inside the loss in chunks: nothing to switch"),
            Map.entry("liger_fused_linear_cross_entropy", "as liger_cross_entropy"),
            Map.entry("bnb_config_kwargs.bnb_4bit_quant_type", "nf4 is the only value accepted"),
            Map.entry("dp_shard_size", "FSDP2 shards over every rank: any other size is refused"),
            Map.entry("hardware.cpu", "hardware: cpu is the same; {cpu: false} means the GPUs the block names"),
            Map.entry("resize_token_embeddings_to_32x", "accepted only where the vocabulary is a multiple of 32 already "
                    + "(Axolotl's resize then adds nothing); refused elsewhere"),
            // dataset source keys: issue 23 ("hub") reads them into DatasetSpec; until then they are read and dropped
            Map.entry("datasets[].name", "issue 23"), Map.entry("datasets[].data_files", "issue 23"),
            Map.entry("datasets[].ds_type", "issue 23"), Map.entry("datasets[].revision", "issue 23"),
            Map.entry("datasets[].shards", "issue 23"), Map.entry("datasets[].shards_idx", "issue 23"));

    /** Values that set a key away from its default, where the type alone does not give one. */
    static final Map<String, String> SAMPLES = Map.ofEntries(
            Map.entry("adapter", "lora"),
            Map.entry("backend", "single"),
            Map.entry("bf16", "true"),
            Map.entry("tf32", "true"),
            Map.entry("chat_template", "chatml"),
            Map.entry("chat_template_jinja", "\"{{ messages }}\""),
            Map.entry("datasets[].chat_template", "chatml"),
            Map.entry("datasets[].chat_template_jinja", "\"{{ messages }}\""),
            Map.entry("datasets[].type", "alpaca"),
            Map.entry("datasets[].train_on_eos", "all"),
            Map.entry("datasets[].train_on_eot", "all"),
            Map.entry("datasets[].roles", "{assistant: [gpt]}"),
            Map.entry("datasets[].roles_to_train", "[user]"),
            Map.entry("datasets[].message_property_mappings", "{role: from}"),
            Map.entry("datasets[].split", "validation"),
            Map.entry("eval_strategy", "steps"),
            Map.entry("excess_length_strategy", "truncate"),
            Map.entry("lr_scheduler", "linear"),
            Map.entry("optimizer", "adamw_torch"),
            Map.entry("save_strategy", "steps"),
            Map.entry("resume_from_checkpoint", "true"),
            Map.entry("rl", "dpo"),
            Map.entry("hardware", "cpu"),
            Map.entry("hardware.gpu_memory", "24GiB"),
            Map.entry("hardware.gpu_type", "H100"),
            Map.entry("fsdp", "[full_shard, auto_wrap]"),
            Map.entry("fsdp_config.auto_wrap_policy", "SIZE_BASED_WRAP"),
            Map.entry("fsdp_config.state_dict_type", "SHARDED_STATE_DICT"),
            Map.entry("fsdp_config.final_state_dict_type", "SHARDED_STATE_DICT"),
            Map.entry("fsdp_config.transformer_layer_cls_to_wrap", "MistralDecoderLayer"),
            Map.entry("fsdp_config.mixed_precision_policy", "{param_dtype: bfloat16}"),
            Map.entry("lora_target_modules", "[q_proj]"),
            Map.entry("dpo_loss_type", "[hinge]"),
            Map.entry("dpo_loss_weights", "[2.0]"),
            Map.entry("trl.loss_type", "grpo"),
            Map.entry("trl.scale_rewards", "batch"),
            Map.entry("trl.reward_funcs", "[think_format_reward]"),
            Map.entry("trl.reward_weights", "[2.0]"),
            Map.entry("special_tokens.additional_special_tokens", "[\"<x>\"]"),
            Map.entry("bnb_config_kwargs.bnb_4bit_quant_type", "nf4"),
            Map.entry("bnb_config_kwargs.bnb_4bit_compute_dtype", "float32"),
            Map.entry("bnb_config_kwargs.bnb_4bit_quant_storage", "uint8"),
            Map.entry("plugins", "[axolotl.integrations.liger.LigerPlugin]"),
            Map.entry("chat_template_kwargs", "{enable_thinking: false}"),
            Map.entry("eot_tokens", "[\"<|im_end|>\"]"),
            Map.entry("metric_for_best_model", "loss"),
            Map.entry("val_set_size", "0.1"),
            Map.entry("lora_model_dir", "adapter"),
            Map.entry("base_model_config", "org/other"),
            Map.entry("tokenizer_config", "org/other"));

    /** The kind of recipe a key belongs in: its baseline is of that kind, with the key's block already on. */
    static String objective(String key) {
        if (key.startsWith("trl.") || key.equals("rl_beta")) {
            return "grpo";
        }
        if (key.startsWith("dpo_") || key.equals("precompute_ref_log_probs") || key.endsWith("field_chosen")
                || key.endsWith("field_rejected")) {
            return "dpo";
        }
        if (key.startsWith("lora_") || key.equals("peft_use_rslora")) {
            return "lora";
        }
        if (key.startsWith("bnb_config_kwargs.")) {
            return "qlora";
        }
        if (key.startsWith("fsdp_config.")) {
            return "fsdp";
        }
        if (key.startsWith("hardware.")) {
            return "gpus";
        }
        return "sft";
    }

    static final String SFT = "datasets:\n  - path: d.jsonl\n    type: chat_template\n"
            + "base_model: org/model\nlearning_rate: 1e-4\nmicro_batch_size: 2\ngradient_accumulation_steps: 1\n";

    static String baseline(String objective) {
        return switch (objective) {
            case "lora" -> SFT + "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\n";
            case "qlora" -> SFT + "adapter: qlora\nload_in_4bit: true\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\n"
                    + "bnb_config_kwargs:\n  bnb_4bit_use_double_quant: true\n";
            case "fsdp" -> SFT + "fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n";
            case "gpus" -> SFT + "hardware:\n  gpus: 1\n";
            case "dpo" -> "datasets:\n  - path: d.jsonl\n    type: chat_template.default\n"
                    + "base_model: org/model\nlearning_rate: 1e-4\nmicro_batch_size: 2\ngradient_accumulation_steps: 1\n"
                    + "rl: dpo\n";
            case "grpo" -> "datasets:\n  - path: d.jsonl\n    type: chat_template\n"
                    + "base_model: org/model\nlearning_rate: 1e-4\nmicro_batch_size: 8\ngradient_accumulation_steps: 1\n"
                    + "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\nrl: grpo\n"
                    + "trl:\n  reward_funcs: [exact_match]\n";
            default -> "datasets:\n  - path: d.jsonl\n    type: chat_template\n"
                    + "base_model: org/model\nlearning_rate: 1e-4\nmicro_batch_size: 2\ngradient_accumulation_steps: 1\n";
        };
    }

    /** A value away from the default, written as YAML. */
    static String sample(Key k) {
        String given = SAMPLES.get(k.name());
        if (given != null) {
            return given;
        }
        // a default per objective (rl_beta: dpo=0.1; grpo=0.0): a sample away from all of them
        String d = k.scoped() ? "" : k.defaultValue();
        return switch (k.type()) {
            case "bool", "bool|auto", "string|bool" -> d.equalsIgnoreCase("true") ? "false" : "true";
            case "int" -> d.isEmpty() ? "3" : Long.toString(Long.parseLong(d) + 1);
            case "number" -> d.isEmpty() || Double.parseDouble(d) == 0 ? "0.37" : Double.toString(Double.parseDouble(d) / 2);
            case "list", "list|string" -> "[a]";
            case "map" -> "{a: 1}";
            default -> "some_text";
        };
    }

    /** The recipe as text: the baseline with {@code key: value} added where it belongs. */
    static String with(String baseline, String key, String value) {
        if (key.startsWith("datasets[].")) {
            String child = key.substring("datasets[].".length());
            int end = baseline.indexOf('\n', baseline.indexOf("    type: ")) + 1;
            return baseline.substring(0, end) + "    " + child + ": " + value + "\n" + baseline.substring(end);
        }
        if (key.contains(".")) {
            String parent = key.substring(0, key.indexOf('.'));
            String child = key.substring(parent.length() + 1);
            if (baseline.contains("\n  " + child + ": ")) {
                return baseline.replaceFirst("\n  " + java.util.regex.Pattern.quote(child) + ": [^\n]*",
                        java.util.regex.Matcher.quoteReplacement("\n  " + child + ": " + value));
            }
            if (baseline.contains("\n" + parent + ":\n")) {
                return baseline.replace("\n" + parent + ":\n", "\n" + parent + ":\n  " + child + ": " + value + "\n");
            }
            return baseline + parent + ":\n  " + child + ": " + value + "\n";
        }
        return baseline + key + ": " + value + "\n";
    }

    /** What validating the text gives: the recipe without file locations, and every finding. */
    record Outcome(String recipe, List<String> findings) {}

    static Outcome validate(Path dir, String text) throws IOException {
        Path file = dir.resolve("recipe.yaml");
        Files.writeString(file, text);
        List<String> findings = new ArrayList<>();
        String recipe = null;
        try {
            ValidatedRecipe validated = ValidatedRecipe.load(file, List.of());
            validated.warnings().forEach(f -> findings.add(f.oneLine()));
            recipe = validated.recipe().toString().replaceAll("\\S*recipe\\.yaml:\\d+:\\d+", "");
        } catch (InvalidRecipe e) {
            e.errors().forEach(f -> findings.add(f.oneLine()));
            e.warnings().forEach(f -> findings.add(f.oneLine()));
        } catch (UserError e) {
            findings.add(e.oneLine());
        }
        return new Outcome(recipe, findings);
    }

    /** Keys whose children are the keys: what they do is what their children do. */
    static final Set<String> BLOCKS = Set.of("base", "datasets", "test_datasets", "trl", "hardware", "fsdp_config",
            "special_tokens", "bnb_config_kwargs", "gradient_checkpointing_kwargs");

    @Test
    void noSupportedKeyIsReadAndDropped(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"messages\": []}\n");
        Files.createDirectories(dir.resolve("adapter"));
        List<String> dropped = new ArrayList<>();
        int checked = 0;
        for (Key k : RecipeKeys.all()) {
            if (k.status() != Status.SUPPORTED || BLOCKS.contains(k.name()) || VALIDATED_ONLY.containsKey(k.name())) {
                continue;
            }
            String base = baseline(objective(k.name()));
            Outcome without = validate(dir, base);
            assertTrue(without.recipe() != null, "the " + objective(k.name()) + " baseline is valid: " + without.findings());
            Outcome with = validate(dir, with(base, k.name(), sample(k)));
            String leaf = k.name().substring(k.name().lastIndexOf('.') + 1);
            boolean said = with.findings().stream().anyMatch(f -> f.contains(leaf));
            boolean stored = with.recipe() != null && !with.recipe().equals(without.recipe());
            if (!said && !stored) {
                dropped.add(k.name() + ": " + sample(k));
            }
            checked++;
        }
        assertTrue(dropped.isEmpty(), dropped.size() + " of " + checked + " supported keys change nothing in the recipe "
                + "and draw no finding:\n" + String.join("\n", dropped));
        assertTrue(checked > 150, "checked " + checked);
    }

    /** Where a key's name may appear as a string literal outside the key table without being read, and why. */
    static final Map<String, String> NAMES_SHARED = Map.ofEntries(
            Map.entry("float32", "a dtype name in tensor code, not the recipe key"),
            Map.entry("device", "the worker plan's device field, set from the resolved run, not from the recipe key"),
            Map.entry("world_size", "the worker plan's world size, set from the launch, not from the recipe key"),
            Map.entry("local_rank", "torchrun's environment variable, not the recipe key"));

    @Test
    void noIgnoredKeyIsNamedByCode() throws IOException {
        Path root = Path.of("..").toAbsolutePath().normalize();
        StringBuilder sources = new StringBuilder();
        for (String module : List.of("recipes", "adapters", "trainers", "cli")) {
            try (Stream<Path> files = Files.walk(root.resolve(module).resolve("src/main"))) {
                for (Path file : files.filter(p -> p.toString().endsWith(".java") || p.toString().endsWith(".py")).toList()) {
                    sources.append(Files.readString(file)).append('\n');
                }
            }
        }
        String code = sources.toString();
        List<String> named = new ArrayList<>();
        for (Key k : RecipeKeys.all()) {
            String leaf = k.name().substring(k.name().lastIndexOf('.') + 1).replace("[]", "");
            if (k.status() == Status.IGNORED && !NAMES_SHARED.containsKey(leaf)
                    && (code.contains("\"" + leaf + "\"") || code.contains("'" + leaf + "'"))) {
                named.add(k.name());
            }
        }
        assertTrue(named.isEmpty(), "ignored keys that code names (so something may act on them): " + named);
    }
}
