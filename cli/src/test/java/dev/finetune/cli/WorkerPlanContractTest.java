package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.backend.fsdp.WorkerPlan;
import dev.finetune.trainers.backend.fsdp.WorkerPlanFile;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Java ↔ Python worker contract: the plans the launcher writes ({@link WorkerPlan#contents}, serialised by
 * {@link WorkerPlanFile#toJson}) against the committed schema, and the worker's loader ({@code finetune_worker/plan.py})
 * against the same schema and those plans.
 */
class WorkerPlanContractTest {

    static final Path PYTHON = MainProcessTest.repoRoot().resolve("trainers/src/main/python");
    static final Path SCHEMA = PYTHON.resolve("finetune_worker/plan.schema.json");

    /** Plans of every shape the writer makes: each objective, LoRA and full, 1 and 2 ranks, CPU and CUDA, resumed. */
    static Map<String, String> plans(Path dir) throws IOException {
        Path configs = MainProcessTest.repoRoot().resolve("configs");
        Path model = configs.resolve("models/stories260K");
        Path full = dir.resolve("full-dpo.yaml");
        Files.writeString(full, Files.readString(configs.resolve("quickstart-dpo.yaml"))
                .replace("base_model: ./models/stories260K", "base_model: " + model)
                .replace("path: data/", "path: " + configs.resolve("data") + "/")
                .replaceAll("(?m)^(adapter|lora_r|lora_alpha|lora_dropout|lora_target_linear):.*$", ""));
        Map<String, ValidatedRecipe> recipes = new LinkedHashMap<>();
        recipes.put("sft", load(configs.resolve("quickstart.yaml"), LaunchShape.RECIPE, "backend=fsdp"));
        recipes.put("sft-2-ranks-checkpointed", load(configs.resolve("quickstart.yaml"), LaunchShape.torchrun(2, null),
                "backend=fsdp", "gradient_checkpointing=true"));
        recipes.put("sft-cuda", load(configs.resolve("quickstart.yaml"), LaunchShape.RECIPE, "backend=fsdp",
                "hardware={gpus: 2, gpu_memory: 80GiB}", "fsdp_version=2",
                "fsdp_config={offload_params: true, reshard_after_forward: false}"));
        recipes.put("dpo", load(configs.resolve("quickstart-dpo.yaml"), LaunchShape.RECIPE, "backend=fsdp",
                "dpo_loss_type=[sigmoid, ipo]", "dpo_loss_weights=[1.0, 0.5]"));
        recipes.put("dpo-continued", load(configs.resolve("quickstart-dpo.yaml"), LaunchShape.RECIPE, "backend=fsdp",
                "lora_model_dir=" + dir.resolve("sft-adapter")));
        recipes.put("dpo-full", load(full, LaunchShape.RECIPE, "backend=fsdp"));
        recipes.put("grpo", load(configs.resolve("quickstart-grpo.yaml"), LaunchShape.torchrun(2, null),
                "backend=fsdp", "trl.delta=1.5", "trl.top_k=5"));
        recipes.put("grpo-without-kl", load(configs.resolve("quickstart-grpo.yaml"), LaunchShape.RECIPE,
                "backend=fsdp", "trl.beta=0"));
        recipes.put("sft-fast-kernels", load(configs.resolve("quickstart.yaml"), LaunchShape.RECIPE, "backend=fsdp",
                "torch_compile=true", "torch_compile_backend=aot_eager", "torch_compile_mode=max-autotune",
                "liger_rms_norm=true", "liger_rope=true", "activation_offloading=true",
                "gradient_checkpointing=true"));
        recipes.put("sft-loss-watchdog", load(configs.resolve("quickstart.yaml"), LaunchShape.RECIPE, "backend=fsdp",
                "loss_watchdog_threshold=5.0", "loss_watchdog_patience=2"));
        // a family the JVM trainer does not run: PEFT initialises the adapter on the targets the plan counted
        Path mixtral = tinyMixtral(dir);
        Map<String, Path> models = Map.of("mixtral-new-adapter", mixtral);
        recipes.put("mixtral-new-adapter", load(configs.resolve("quickstart.yaml"), LaunchShape.RECIPE, "backend=fsdp",
                "base_model=" + mixtral, "tokenizer_config=" + model, "lora_dropout=0"));
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<String, ValidatedRecipe> e : recipes.entrySet()) {
            Path resume = e.getKey().equals("sft") ? dir.resolve("out/checkpoint-5") : null;
            out.put(e.getKey(), WorkerPlan.contents(e.getValue(), dir.resolve("batches.safetensors"), 10,
                    models.getOrDefault(e.getKey(), model), "model-identity", model, resume).toJson());
        }
        return out;
    }

    private static ValidatedRecipe load(Path recipe, LaunchShape shape, String... overrides) {
        List<String> all = new ArrayList<>(List.of(overrides));
        all.add("output_dir=" + recipe.getParent().resolve("unused-out"));
        return ValidatedRecipe.load(recipe, all, shape);
    }

    @Test
    void everyPlanTheLauncherWritesFollowsTheSchema(@TempDir Path dir) throws IOException {
        JsonObject schema = JsonParser.parseString(Files.readString(SCHEMA)).getAsJsonObject();
        Set<String> valued = new TreeSet<>();
        for (Map.Entry<String, String> plan : plans(dir).entrySet()) {
            JsonElement document = JsonParser.parseString(plan.getValue());
            List<String> violations = new ArrayList<>();
            SchemaCheck.check(schema, document, "$", violations);
            assertEquals(List.of(), violations, plan.getKey() + ":\n" + plan.getValue());
            collect(document, "$", valued);
        }
        // every key of the schema, nullable ones included, is written with a value by some plan above
        Set<String> declared = new TreeSet<>();
        declared(schema, "$", declared);
        declared.removeAll(valued);
        assertEquals(Set.of(), declared, "schema keys no sample plan gives a value");
        assertTrue(plans(dir).get("sft-cuda").contains("\"compute_dtype\": \"bfloat16\""));
        assertTrue(plans(dir).get("dpo-full").contains("\"reference\": \"starting_weights\""));
        assertTrue(plans(dir).get("mixtral-new-adapter").contains("\"initial\": null"));
    }

    @Test
    void theWorkersLoaderMatchesTheSchemaAndReadsThosePlans(@TempDir Path dir) throws IOException {
        Path written = Files.createDirectories(dir.resolve("plans"));
        for (Map.Entry<String, String> plan : plans(dir).entrySet()) {
            Files.writeString(written.resolve(plan.getKey() + ".json"), plan.getValue());
        }
        PythonStack.runScript("/contract/worker_plan_contract.py", dir, PYTHON.toString(), SCHEMA.toString(),
                written.toString());
    }

    private static void collect(JsonElement value, String path, Set<String> out) {
        if (value.isJsonObject()) {
            for (Map.Entry<String, JsonElement> e : value.getAsJsonObject().entrySet()) {
                if (!e.getValue().isJsonNull()) {
                    out.add(path + "." + e.getKey());
                    collect(e.getValue(), path + "." + e.getKey(), out);
                }
            }
        } else if (value.isJsonArray()) {
            value.getAsJsonArray().forEach(item -> collect(item, path + "[]", out));
        }
    }

    private static void declared(JsonObject schema, String path, Set<String> out) {
        if (schema.has("properties")) {
            for (Map.Entry<String, JsonElement> e : schema.getAsJsonObject("properties").entrySet()) {
                out.add(path + "." + e.getKey());
                declared(e.getValue().getAsJsonObject(), path + "." + e.getKey(), out);
            }
        }
        if (schema.has("items")) {
            declared(schema.getAsJsonObject("items"), path + "[]", out);
        }
    }

    /** A two-layer Mixtral's config.json (no weights: plans and the meta device need none) in {@code dir/tiny-mixtral}. */
    static Path tinyMixtral(Path dir) throws IOException {
        Path mixtral = Files.createDirectories(dir.resolve("tiny-mixtral"));
        Files.writeString(mixtral.resolve("config.json"), """
                {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 32,
                 "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "vocab_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 256,
                 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32",
                 "bos_token_id": 1, "eos_token_id": 2}
                """);
        return mixtral;
    }
}
