package dev.finetune.recipes.model;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ModelConfig.Experts;
import dev.finetune.recipes.model.ModelConfig.RopeScaling;
import dev.finetune.recipes.model.ModelConfig.SlidingWindow;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Reads a Hugging Face {@code config.json} into a {@link ModelConfig}: each key's name, its default when the file
 * leaves it out, and what it means for the config's {@link Family} (Qwen2's q/k/v biases need no key, Gemma ties its
 * head unless told otherwise, Qwen slides only with {@code use_sliding_window}). Apart from the record so that the
 * record holds plain facts and this file holds every rule of the file format; the record's own constructor still
 * bounds every number, whoever builds it.
 */
final class ConfigJsonReader {

    private ConfigJsonReader() {}

    /** Reads and validates {@code dir/config.json}. */
    static ModelConfig read(Path dir) {
        return read(dir, java.util.Map.of());
    }

    /** {@code dir/config.json} with {@code overrides_of_model_config} applied ({@link ConfigOverrides}). */
    static ModelConfig read(Path dir, java.util.Map<String, Object> overrides) {
        return fromJson(ConfigOverrides.apply(json(dir), overrides), dir.resolve("config.json").toString());
    }

    /** {@code dir/config.json} as written. */
    static JsonObject json(Path dir) {
        Path file = dir.resolve("config.json");
        if (!Files.exists(file)) {
            throw new UserError(file.toString(), "cannot read model config: no config.json in " + dir,
                    "point base_model at a directory holding a Hugging Face config.json");
        }
        String text = dev.finetune.recipes.BoundedFiles.readText(file, dev.finetune.recipes.BoundedFiles.CONFIG_BYTES,
                "the model's config.json");
        JsonObject json;
        try {
            json = JsonParser.parseString(text).getAsJsonObject();
        } catch (JsonParseException | IllegalStateException e) {
            throw new UserError(file.toString(), "not a JSON object (" + ModelConfig.jsonProblem(e) + ")",
                    "check the file is a Hugging Face config.json");
        }
        return json;
    }

    /** Builds the record from a parsed {@code config.json}; {@code where} names the source in error messages. */
    static ModelConfig fromJson(JsonObject json, String where) {
        try {
            return fromJsonUnchecked(json, where);
        } catch (UserError e) {
            // the record's own checks name the key as config.json: KEY; say which file it was
            throw e.where() != null && e.where().startsWith("config.json") && !where.equals("config.json")
                    ? new UserError(where + e.where().substring("config.json".length()), e.getMessage(), e.hint()) : e;
        } catch (NumberFormatException | UnsupportedOperationException | IllegalStateException | ClassCastException e) {
            throw new UserError(where, "a value has the wrong type (" + ModelConfig.jsonProblem(e) + ")",
                    "numbers must be JSON numbers and names JSON strings, as in the model's original config.json");
        }
    }

    private static ModelConfig fromJsonUnchecked(JsonObject json, String where) {
        String type = string(json, "model_type", "llama");
        Family family = Family.of(type).orElseThrow(() -> unknownFamily(type, json, where));
        int hidden = requiredInt(json, "hidden_size", where);
        int heads = requiredInt(json, "num_attention_heads", where);
        int layers = requiredInt(json, "num_hidden_layers", where);
        int intermediate = requiredInt(json, "intermediate_size", where);
        int kvHeads = optionalInt(json, "num_key_value_heads", heads);
        int headDim = optionalInt(json, "head_dim", family.defaultHeadDim(hidden, heads));
        JsonObject rope = ropeParameters(json);
        RopeScaling scaling = null;
        JsonElement rs = json.get("rope_scaling");
        JsonObject scalingJson = rs != null && rs.isJsonObject() ? rs.getAsJsonObject() : rope;
        if (scalingJson != null) {
            String kind = string(scalingJson, "rope_type", string(scalingJson, "type", "default"));
            if (!kind.equals("default")) {
                scaling = new RopeScaling(kind, dbl(scalingJson, "factor", 1.0), dbl(scalingJson, "low_freq_factor", 1.0),
                        dbl(scalingJson, "high_freq_factor", 4.0), optionalInt(scalingJson, "original_max_position_embeddings", 8192));
            }
        }
        double theta = dbl(json, "rope_theta", rope != null ? dbl(rope, "rope_theta", 10000.0) : 10000.0);
        boolean attentionBias = bool(json, "attention_bias", false);
        boolean qkvBias = switch (family.attentionBiases()) {
            case NONE -> false;
            case QKV_ALWAYS -> true;
            case QKV_BY_CONFIG -> bool(json, "qkv_bias", true);
            case ALL_BY_CONFIG -> attentionBias;
        };
        boolean outputBias = family.attentionBiases() == Family.Biases.ALL_BY_CONFIG && attentionBias;
        return new ModelConfig(
                family,
                hidden,
                intermediate,
                layers,
                heads,
                kvHeads,
                headDim,
                requiredInt(json, "vocab_size", where),
                optionalInt(json, "max_position_embeddings", 2048),
                dbl(json, "rms_norm_eps", 1e-6),
                theta,
                scaling,
                qkvBias,
                outputBias,
                family.mlpBiasByConfig() && bool(json, "mlp_bias", false),
                bool(json, "tie_word_embeddings", family.tiedByDefault()),
                experts(family, json, layers, intermediate, where),
                slidingWindow(family, json, layers),
                string(json, "torch_dtype", string(json, "dtype", "float32")),
                nullableInt(json, "bos_token_id"),
                nullableInt(json, "eos_token_id"));
    }

    private static UserError unknownFamily(String type, JsonObject json, String where) {
        String hint = "finetune plans and trains these model_types: " + Family.supportedList();
        if (type.equals("gemma3") || json.has("text_config")) {
            hint = "this is a vision-language checkpoint; its text-only siblings (model_type gemma3_text: gemma-3-270m, "
                    + "gemma-3-1b) are supported. " + hint;
        }
        return new UserError(where + ": model_type", "model_type '" + type + "' is an architecture finetune does not know",
                hint);
    }

    /**
     * transformers 5 writes {@code rope_parameters} where older configs had {@code rope_theta} and {@code rope_scaling};
     * families with per-layer-type RoPE (Gemma 3, OLMo 3) nest one per layer type, of which the full-attention one
     * is what a single theta stands for.
     */
    private static JsonObject ropeParameters(JsonObject json) {
        JsonElement e = json.get("rope_parameters");
        if (e == null || !e.isJsonObject()) {
            return null;
        }
        JsonObject rope = e.getAsJsonObject();
        JsonElement full = rope.get("full_attention");
        return full != null && full.isJsonObject() ? full.getAsJsonObject() : rope;
    }

    /** The experts as the family's config class reads them; {@code null} for a dense family or a config with none. */
    private static Experts experts(Family family, JsonObject json, int layers, int intermediate, String where) {
        if (family.mlp() == Family.Mlp.GATED) {
            return null;
        }
        int count = optionalInt(json, "num_local_experts", optionalInt(json, "num_experts", 0));
        if (count == 0) {
            throw new UserError(where + ": num_experts", family.modelType() + " is a mixture-of-experts family but the "
                    + "config names no experts", "fix or restore the model's config.json");
        }
        int perToken = optionalInt(json, "num_experts_per_tok", 2);
        boolean mixtral = family.mlp() == Family.Mlp.EXPERTS;
        int expertWidth = mixtral ? intermediate : optionalInt(json, "moe_intermediate_size", intermediate);
        int shared = family.mlp() == Family.Mlp.EXPERTS_AND_SHARED
                ? optionalInt(json, "shared_expert_intermediate_size", intermediate) : 0;
        List<Boolean> sparse = new ArrayList<>();
        int step = mixtral ? 1 : optionalInt(json, "decoder_sparse_step", 1);
        Set<Integer> denseOnly = mixtral ? Set.of() : intSet(json, "mlp_only_layers");
        for (int i = 0; i < layers; i++) {
            sparse.add(!denseOnly.contains(i) && step > 0 && (i + 1) % step == 0);
        }
        return new Experts(count, perToken, expertWidth, shared, sparse, dbl(json, "router_aux_loss_coef", 0.001),
                bool(json, "output_router_logits", false));
    }

    /** Which layers slide, by the family's rule; {@code null} when none does. */
    private static SlidingWindow slidingWindow(Family family, JsonObject json, int layers) {
        Integer window = json.has("sliding_window") ? nullableInt(json, "sliding_window") : family.defaultSlidingWindow();
        boolean used = bool(json, "use_sliding_window", false);
        List<String> types = strings(json, "layer_types");
        int maxWindowLayers = optionalInt(json, "max_window_layers", 28);
        List<Boolean> slides = new ArrayList<>();
        for (int i = 0; i < layers; i++) {
            boolean typed = types != null && i < types.size();
            boolean sliding = switch (family.windows()) {
                case NONE -> false;
                case ALL_WHEN_SET -> window != null;
                case ALL_WHEN_USED -> used && window != null;
                // Qwen's config classes drop the window unless use_sliding_window, whatever layer_types says
                case FROM_MAX_WINDOW_LAYERS -> used && (typed ? types.get(i).equals("sliding_attention") : i >= maxWindowLayers);
                case ODD_BELOW_MAX_WINDOW_LAYERS -> used
                        && (typed ? types.get(i).equals("sliding_attention") : (i + 1) % 2 == 1 && i < maxWindowLayers);
                case PATTERN -> typed ? types.get(i).equals("sliding_attention") : (i + 1) % family.fullAttentionEvery() != 0;
            };
            slides.add(sliding);
        }
        if (window == null || window <= 0 || !slides.contains(true)) {
            return null;
        }
        return new SlidingWindow(window, slides);
    }

    private static Set<Integer> intSet(JsonObject json, String key) {
        JsonElement e = json.get(key);
        Set<Integer> out = new HashSet<>();
        if (e != null && e.isJsonArray()) {
            e.getAsJsonArray().forEach(v -> out.add(v.getAsInt()));
        }
        return out;
    }

    private static List<String> strings(JsonObject json, String key) {
        JsonElement e = json.get(key);
        if (e == null || !e.isJsonArray()) {
            return null;
        }
        List<String> out = new ArrayList<>();
        e.getAsJsonArray().forEach(v -> out.add(v.getAsString()));
        return out;
    }

    private static int requiredInt(JsonObject json, String key, String where) {
        JsonElement e = json.get(key);
        if (e == null || e.isJsonNull()) {
            throw new UserError(where + ": " + key, "missing required key '" + key + "'", "a Hugging Face config.json for a decoder model has it");
        }
        return exactInt(e, key, where);
    }

    /** An int as written: 3000000000 is refused, not wrapped to a negative number. */
    private static int exactInt(JsonElement e, String key, String where) {
        try {
            long value = e.getAsBigDecimal().longValueExact();
            if (value > Integer.MAX_VALUE || value < Integer.MIN_VALUE) {
                throw new ArithmeticException("out of range");
            }
            return (int) value;
        } catch (RuntimeException ex) {
            throw new UserError(where + ": " + key, key + " must be a whole number up to " + Integer.MAX_VALUE
                    + ", got " + e, "fix the value in config.json");
        }
    }

    private static int optionalInt(JsonObject json, String key, int fallback) {
        JsonElement e = json.get(key);
        return e == null || e.isJsonNull() ? fallback : exactInt(e, key, "config.json");
    }

    private static Integer nullableInt(JsonObject json, String key) {
        JsonElement e = json.get(key);
        // eos_token_id may be a list in newer configs; the first entry is the primary one.
        if (e == null || e.isJsonNull()) {
            return null;
        }
        if (e.isJsonArray()) {
            return e.getAsJsonArray().isEmpty() ? null : e.getAsJsonArray().get(0).getAsInt();
        }
        return e.getAsInt();
    }

    private static double dbl(JsonObject json, String key, double fallback) {
        JsonElement e = json.get(key);
        return e == null || e.isJsonNull() ? fallback : e.getAsDouble();
    }

    private static boolean bool(JsonObject json, String key, boolean fallback) {
        JsonElement e = json.get(key);
        return e == null || e.isJsonNull() ? fallback : e.getAsBoolean();
    }

    private static String string(JsonObject json, String key, String fallback) {
        JsonElement e = json.get(key);
        return e == null || e.isJsonNull() ? fallback : e.getAsString();
    }
}
