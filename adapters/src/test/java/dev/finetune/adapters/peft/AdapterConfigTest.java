package dev.finetune.adapters.peft;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

class AdapterConfigTest {

    /** The shape of a config written by PEFT 0.13's save_pretrained for a Llama LoRA (sorted keys, indent 2). */
    private static final String PEFT_WRITTEN = """
            {
              "alpha_pattern": {},
              "auto_mapping": null,
              "base_model_name_or_path": "meta-llama/Llama-3.2-1B",
              "bias": "none",
              "fan_in_fan_out": false,
              "inference_mode": true,
              "init_lora_weights": true,
              "layer_replication": null,
              "layers_pattern": null,
              "layers_to_transform": null,
              "loftq_config": {},
              "lora_alpha": 32,
              "lora_dropout": 0.05,
              "megatron_config": null,
              "megatron_core": "megatron.core",
              "modules_to_save": null,
              "peft_type": "LORA",
              "r": 16,
              "rank_pattern": {},
              "revision": null,
              "target_modules": ["v_proj", "q_proj"],
              "task_type": "CAUSAL_LM",
              "use_dora": false,
              "use_rslora": true
            }
            """;

    @Test
    void writesPeftsFieldsAndValues() {
        AdapterConfig config = new AdapterConfig(8, 16, 0.05,
                new AdapterConfig.Targets.Names(List.of("q_proj", "v_proj")), false, "models/stories260K");
        JsonObject json = JsonParser.parseString(config.toJson()).getAsJsonObject();
        assertEquals("LORA", json.get("peft_type").getAsString());
        assertEquals("CAUSAL_LM", json.get("task_type").getAsString());
        assertEquals("none", json.get("bias").getAsString());
        assertEquals(false, json.get("fan_in_fan_out").getAsBoolean());
        assertEquals(true, json.get("inference_mode").getAsBoolean());
        assertEquals(false, json.get("use_rslora").getAsBoolean());
        assertEquals(false, json.get("use_dora").getAsBoolean());
        assertTrue(json.get("modules_to_save").isJsonNull());
        assertEquals("8", json.get("r").toString());
        assertEquals("16", json.get("lora_alpha").toString(), "an integral alpha is written as PEFT's int");
        assertEquals(0.05, json.get("lora_dropout").getAsDouble());
        assertEquals("[\"q_proj\",\"v_proj\"]", json.get("target_modules").toString());
        assertEquals("models/stories260K", json.get("base_model_name_or_path").getAsString());
        List<String> keys = List.copyOf(json.keySet());
        assertEquals(keys.stream().sorted().toList(), keys, "keys sorted, as json.dumps(sort_keys=True)");
        assertTrue(config.toJson().startsWith("{\n  \""), "two-space indent");
        assertEquals(config, AdapterConfig.parse(config.toJson(), "test"));
    }

    @Test
    void readsAConfigWrittenByPeft() {
        AdapterConfig config = AdapterConfig.parse(PEFT_WRITTEN, "adapter_config.json");
        assertEquals(16, config.r());
        assertEquals(32.0, config.loraAlpha());
        assertEquals(0.05, config.loraDropout());
        assertEquals(true, config.useRslora());
        assertEquals(32 / Math.sqrt(16), config.scaling(), 1e-12);
        assertEquals(Set.of("v_proj", "q_proj"),
                Set.copyOf(((AdapterConfig.Targets.Names) config.targets()).names()));
        assertEquals("meta-llama/Llama-3.2-1B", config.baseModelNameOrPath());

        AdapterConfig regex = AdapterConfig.parse(
                PEFT_WRITTEN.replace("[\"v_proj\", \"q_proj\"]", "\".*\\\\.(q|v)_proj\""), "x");
        assertEquals(new AdapterConfig.Targets.Regex(".*\\.(q|v)_proj"), regex.targets());
    }

    @Test
    void refusesSettingsThatWouldChangeTheMathSilently() {
        for (String[] change : new String[][] {
            {"\"use_dora\": false", "\"use_dora\": true"},
            {"\"bias\": \"none\"", "\"bias\": \"all\""},
            {"\"fan_in_fan_out\": false", "\"fan_in_fan_out\": true"},
            {"\"rank_pattern\": {}", "\"rank_pattern\": {\"q_proj\": 4}"},
            {"\"modules_to_save\": null", "\"modules_to_save\": [\"lm_head\"]"},
            {"\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\""},
        }) {
            String json = PEFT_WRITTEN.replace(change[0], change[1]);
            UserError error = assertThrows(UserError.class, () -> AdapterConfig.parse(json, "a/adapter_config.json"),
                    change[1]);
            assertEquals("a/adapter_config.json", error.where());
        }
    }
}
