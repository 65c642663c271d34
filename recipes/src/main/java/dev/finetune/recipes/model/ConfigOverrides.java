package dev.finetune.recipes.model;

import com.google.gson.Gson;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * {@code overrides_of_model_config}: the model's {@code config.json} with the recipe's values in place of the file's,
 * before anything reads it (the plan, validation, both trainers). Axolotl sets each key on the Hugging Face config
 * object, so a key replaces the file's whole entry: {@code rope_scaling: {...}} is the new dict, not a merge into the
 * old one.
 */
public final class ConfigOverrides {
    private static final Gson GSON = new Gson();

    private ConfigOverrides() {}

    /** {@code config} (unchanged) with {@code overrides} applied, as a new object. */
    public static JsonObject apply(JsonObject config, Map<String, Object> overrides) {
        if (overrides.isEmpty()) {
            return config;
        }
        JsonObject merged = config.deepCopy();
        overrides.forEach((key, value) -> merged.add(key, json(value)));
        return merged;
    }

    /** A YAML value (text, number, boolean, null, list, map) as the JSON that config.json would hold. */
    static JsonElement json(Object value) {
        return value == null ? JsonNull.INSTANCE : GSON.toJsonTree(value);
    }

    /**
     * The overridden keys that change nothing the single-device trainer reads from config.json ({@link ModelConfig}
     * is all it reads): there the key would be accepted and have no effect, while transformers would apply it. A key
     * given its file's own value changes nothing anywhere and is not named.
     */
    public static List<String> unreadByJvm(JsonObject config, Map<String, Object> overrides, String where) {
        ModelConfig original = ModelConfig.fromJson(config, where);
        List<String> unread = new ArrayList<>();
        overrides.forEach((key, value) -> {
            if (json(value).equals(config.get(key))) {
                return;
            }
            JsonObject one = config.deepCopy();
            one.add(key, json(value));
            if (ModelConfig.fromJson(one, where).equals(original)) {
                unread.add(key);
            }
        });
        return unread;
    }

    /** What to do about an override the single-device trainer does not read. */
    public static final String JVM_HINT = "remove it, or train on the torch worker (backend: fsdp, on CPU ranks too), "
            + "where transformers applies it";

    /**
     * The refusal of the overrides the single-device trainer would not act on ({@link #unreadByJvm}), or null when
     * it reads every one: validate says it when the model's config.json is at hand, the run as it starts otherwise.
     */
    public static String jvmRefusal(JsonObject config, Map<String, Object> overrides) {
        List<String> unread = unreadByJvm(config, overrides, "config.json");
        return unread.isEmpty() ? null : "overrides_of_model_config: " + String.join(", ", unread)
                + (unread.size() == 1 ? " changes" : " change") + " nothing the single-device trainer reads from "
                + "config.json (where this recipe runs), so " + (unread.size() == 1 ? "it" : "they")
                + " would have no effect";
    }
}
