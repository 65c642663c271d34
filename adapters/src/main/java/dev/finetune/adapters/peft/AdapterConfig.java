package dev.finetune.adapters.peft;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import com.google.gson.JsonPrimitive;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * PEFT's {@code adapter_config.json} for a LoRA adapter: what PEFT, vLLM and our own merge need to apply it.
 *
 * @param targets {@code target_modules}: module names, or one regex that must match a full layer name
 * @param baseModelNameOrPath the model the adapter was trained on ({@code base_model} of the recipe)
 */
public record AdapterConfig(
        int r, double loraAlpha, double loraDropout, Targets targets, boolean useRslora, String baseModelNameOrPath) {

    public static final String FILE_NAME = "adapter_config.json";

    /** PEFT accepts {@code target_modules} as a list of names or as a single regex string. */
    public sealed interface Targets {
        record Names(List<String> names) implements Targets {}

        record Regex(String pattern) implements Targets {}
    }

    public static AdapterConfig of(AdapterSpec.Lora spec, Targets targets, String baseModelNameOrPath) {
        return new AdapterConfig(spec.r(), spec.alpha(), spec.dropout(), targets, spec.useRslora(), baseModelNameOrPath);
    }

    /** The factor applied to {@code B·A}: {@code alpha/r}, or {@code alpha/√r} with rsLoRA. */
    public double scaling() {
        return useRslora ? loraAlpha / Math.sqrt(r) : loraAlpha / r;
    }

    /**
     * The JSON PEFT's {@code save_pretrained} writes: sorted keys, 2-space indent, {@code inference_mode: true},
     * and the fields we never use set to their PEFT defaults so that loaders find every key they look up.
     */
    public String toJson() {
        Map<String, JsonElement> fields = new TreeMap<>();
        fields.put("alpha_pattern", new JsonObject());
        fields.put("auto_mapping", JsonNull.INSTANCE);
        fields.put("base_model_name_or_path",
                baseModelNameOrPath == null ? JsonNull.INSTANCE : new JsonPrimitive(baseModelNameOrPath));
        fields.put("bias", new JsonPrimitive("none"));
        fields.put("fan_in_fan_out", new JsonPrimitive(false));
        fields.put("inference_mode", new JsonPrimitive(true));
        fields.put("init_lora_weights", new JsonPrimitive(true));
        fields.put("layers_pattern", JsonNull.INSTANCE);
        fields.put("layers_to_transform", JsonNull.INSTANCE);
        fields.put("lora_alpha", number(loraAlpha));
        fields.put("lora_dropout", new JsonPrimitive(loraDropout));
        fields.put("modules_to_save", JsonNull.INSTANCE);
        fields.put("peft_type", new JsonPrimitive("LORA"));
        fields.put("r", new JsonPrimitive(r));
        fields.put("rank_pattern", new JsonObject());
        fields.put("revision", JsonNull.INSTANCE);
        fields.put("target_modules", targetsJson());
        fields.put("task_type", new JsonPrimitive("CAUSAL_LM"));
        fields.put("use_dora", new JsonPrimitive(false));
        fields.put("use_rslora", new JsonPrimitive(useRslora));
        JsonObject json = new JsonObject();
        fields.forEach(json::add);
        Gson gson = new GsonBuilder().setPrettyPrinting().serializeNulls().create();
        return gson.toJson(json) + "\n";
    }

    public void write(Path directory) throws IOException {
        Files.writeString(directory.resolve(FILE_NAME), toJson(), StandardCharsets.UTF_8);
    }

    public static AdapterConfig read(Path directory) {
        Path file = directory.resolve(FILE_NAME);
        if (!Files.exists(file)) {
            throw new UserError(file.toString(), "cannot read the adapter config: no such file",
                    "point at a directory holding adapter_config.json and adapter_model.safetensors");
        }
        String text = dev.finetune.recipes.BoundedFiles.readText(file, dev.finetune.recipes.BoundedFiles.CONFIG_BYTES,
                "the adapter config");
        return parse(text, file.toString());
    }

    /** Reads PEFT's JSON; settings we cannot apply faithfully are refused rather than ignored. */
    public static AdapterConfig parse(String text, String where) {
        JsonObject json;
        try {
            json = JsonParser.parseString(text).getAsJsonObject();
        } catch (JsonParseException | IllegalStateException e) {
            throw new UserError(where, "not a JSON object: " + e.getMessage(), "restore adapter_config.json");
        }
        String peftType = string(json, "peft_type", where, null);
        if (!"LORA".equals(peftType)) {
            throw new UserError(where, "peft_type is " + peftType + ", only LORA adapters are supported",
                    "train a LoRA adapter (adapter: lora or qlora)");
        }
        requireDefault(json, "bias", new JsonPrimitive("none"), where);
        requireDefault(json, "fan_in_fan_out", new JsonPrimitive(false), where);
        requireDefault(json, "use_dora", new JsonPrimitive(false), where);
        requireDefault(json, "modules_to_save", new JsonArray(), where);
        requireDefault(json, "rank_pattern", new JsonObject(), where);
        requireDefault(json, "alpha_pattern", new JsonObject(), where);
        int r = (int) numberOr(json, "r", Double.NaN, where);
        double alpha = numberOr(json, "lora_alpha", Double.NaN, where);
        double dropout = numberOr(json, "lora_dropout", 0, where);
        boolean rslora = json.has("use_rslora") && !json.get("use_rslora").isJsonNull()
                && json.get("use_rslora").getAsBoolean();
        String base = string(json, "base_model_name_or_path", where, null);
        return new AdapterConfig(r, alpha, dropout, targets(json, where), rslora, base);
    }

    private JsonElement targetsJson() {
        if (targets instanceof Targets.Regex regex) {
            return new JsonPrimitive(regex.pattern());
        }
        JsonArray names = new JsonArray();
        ((Targets.Names) targets).names().forEach(names::add);
        return names;
    }

    private static Targets targets(JsonObject json, String where) {
        JsonElement element = json.get("target_modules");
        if (element == null || element.isJsonNull()) {
            throw new UserError(where, "target_modules is missing", "list the adapted modules, e.g. [\"q_proj\"]");
        }
        if (element.isJsonPrimitive()) {
            return new Targets.Regex(element.getAsString());
        }
        List<String> names = new ArrayList<>();
        for (JsonElement name : element.getAsJsonArray()) {
            names.add(name.getAsString());
        }
        return new Targets.Names(List.copyOf(names));
    }

    /** A value that is absent, null, or equal to PEFT's default (an empty list/map counts as the null default). */
    private static void requireDefault(JsonObject json, String key, JsonElement expected, String where) {
        JsonElement value = json.get(key);
        if (value == null || value.isJsonNull() || value.equals(expected)) {
            return;
        }
        throw new UserError(where, key + " is " + value + ", which this tool cannot apply",
                "use an adapter trained with " + key + " = " + expected);
    }

    private static double numberOr(JsonObject json, String key, double fallback, String where) {
        JsonElement value = json.get(key);
        if (value == null || value.isJsonNull()) {
            if (Double.isNaN(fallback)) {
                throw new UserError(where, key + " is missing", "restore adapter_config.json as PEFT wrote it");
            }
            return fallback;
        }
        try {
            return value.getAsDouble();
        } catch (NumberFormatException | UnsupportedOperationException | IllegalStateException e) {
            throw new UserError(where, key + " must be a number, got " + value, "restore adapter_config.json");
        }
    }

    private static String string(JsonObject json, String key, String where, String fallback) {
        JsonElement value = json.get(key);
        if (value == null || value.isJsonNull()) {
            return fallback;
        }
        if (!value.isJsonPrimitive()) {
            throw new UserError(where, key + " must be a string, got " + value, "restore adapter_config.json");
        }
        return value.getAsString();
    }

    /** Whole numbers as JSON integers ({@code 16}, not {@code 16.0}), as Python writes them. */
    private static JsonPrimitive number(double value) {
        return value == Math.rint(value) && Math.abs(value) < 1e15 ? new JsonPrimitive((long) value)
                : new JsonPrimitive(value);
    }
}
