package dev.finetune.recipes.model;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The architecture of a decoder-only transformer, as a Hugging Face {@code config.json} describes it.
 *
 * <p>One record for both uses: the memory model counts parameters from it, the trainer builds the network from
 * it. Field names follow the config keys so a reader can check them against the file.
 *
 * @param modelType {@code llama}, {@code mistral}, {@code qwen2}, {@code qwen3}, {@code gemma2}, {@code phi3}, {@code mixtral}, ...
 * @param headDim per-head width; {@code hiddenSize / numAttentionHeads} unless the config says otherwise
 * @param attentionBias q/k/v projections carry a bias (Qwen2; {@code attention_bias} in Llama configs)
 * @param qkNorm per-head RMSNorm on q and k before RoPE (Qwen3)
 * @param normsPerLayer RMSNorm weights per decoder layer: 2 for Llama, 4 for Gemma 2
 * @param numLocalExperts MoE experts per layer (Mixtral); 0 for a dense MLP
 * @param numExpertsPerToken experts each token is routed to; 0 for a dense MLP
 * @param ropeScaling {@code null} when the config has none
 */
public record ModelConfig(
        String modelType,
        int hiddenSize,
        int intermediateSize,
        int numHiddenLayers,
        int numAttentionHeads,
        int numKeyValueHeads,
        int headDim,
        int vocabSize,
        int maxPositionEmbeddings,
        double rmsNormEps,
        double ropeTheta,
        RopeScaling ropeScaling,
        boolean attentionBias,
        boolean mlpBias,
        boolean qkNorm,
        int normsPerLayer,
        boolean tieWordEmbeddings,
        int numLocalExperts,
        int numExpertsPerToken,
        String torchDtype,
        Integer bosTokenId,
        Integer eosTokenId) {

    /**
     * @param type {@code llama3}, {@code linear}, ... ({@code rope_type} or the older {@code type})
     * @param factor scale factor
     * @param lowFreqFactor llama3 only
     * @param highFreqFactor llama3 only
     * @param originalMaxPositionEmbeddings llama3 only
     */
    public record RopeScaling(
            String type, double factor, double lowFreqFactor, double highFreqFactor, int originalMaxPositionEmbeddings) {}

    public ModelConfig {
        String where = "config.json";
        // Bounds far above any released model, so that a crafted config.json is refused at once instead of
        // costing minutes and gigabytes before some later step fails (num_hidden_layers: 1000000).
        bounded(where, "hidden_size", hiddenSize, 1 << 17);
        bounded(where, "intermediate_size", intermediateSize, 1 << 20);
        bounded(where, "num_hidden_layers", numHiddenLayers, 1024);
        bounded(where, "num_attention_heads", numAttentionHeads, 4096);
        bounded(where, "num_key_value_heads", numKeyValueHeads, 4096);
        bounded(where, "head_dim", headDim, 4096);
        bounded(where, "vocab_size", vocabSize, 1 << 23);
        bounded(where, "max_position_embeddings", maxPositionEmbeddings, 1 << 24);
        if (numLocalExperts < 0 || numLocalExperts > 4096 || numExpertsPerToken < 0 || numExpertsPerToken > 4096) {
            throw new UserError(where + ": num_local_experts", "expert counts must be from 0 to 4096, got "
                    + numLocalExperts + " and " + numExpertsPerToken, "fix or restore the model's config.json");
        }
        if (numAttentionHeads % numKeyValueHeads != 0) {
            throw new UserError(where + ": num_key_value_heads",
                    "num_attention_heads " + numAttentionHeads + " is not a multiple of num_key_value_heads " + numKeyValueHeads,
                    "grouped-query attention shares each key/value head among a whole number of query heads");
        }
    }

    /** The weight tensors of this architecture, with their Hugging Face names and shapes. */
    public ModelParameters parameters() {
        return ModelParameters.of(this);
    }

    /** Total parameters, counted exactly as the checkpoint's safetensors hold them (tied head counted once). */
    public long parameterCount() {
        return parameters().total();
    }

    /** Query heads served by each key/value head. */
    public int queryGroups() {
        return numAttentionHeads / numKeyValueHeads;
    }

    /** Reads and validates {@code dir/config.json}. */
    public static ModelConfig read(Path dir) {
        Path file = dir.resolve("config.json");
        String text;
        try {
            text = Files.readString(file);
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot read model config: " + e.getMessage(),
                    "point base_model at a directory holding a Hugging Face config.json");
        }
        JsonObject json;
        try {
            json = JsonParser.parseString(text).getAsJsonObject();
        } catch (JsonParseException | IllegalStateException e) {
            throw new UserError(file.toString(), "not a JSON object (" + jsonProblem(e) + ")",
                    "check the file is a Hugging Face config.json");
        }
        return fromJson(json, file.toString());
    }

    /** A JSON parser's complaint without the library's class names and links. */
    public static String jsonProblem(RuntimeException e) {
        Throwable root = e;
        while (root.getCause() != null) {
            root = root.getCause();
        }
        String message = root.getMessage() == null ? root.getClass().getSimpleName() : root.getMessage();
        return message.replaceAll("[a-z]+(\\.[a-z]+)+\\.[A-Z][A-Za-z]*Exception: ", "")
                .replaceAll("\\s*See https?://\\S+", "").replace("Use JsonReader.setLenient(true) to accept malformed JSON at ", "at ")
                .strip();
    }

    /** Builds the record from a parsed {@code config.json}; {@code where} names the source in error messages. */
    public static ModelConfig fromJson(JsonObject json, String where) {
        try {
            return fromJsonUnchecked(json, where);
        } catch (UserError e) {
            // the record's own checks name the key as config.json: KEY; say which file it was
            throw e.where() != null && e.where().startsWith("config.json") && !where.equals("config.json")
                    ? new UserError(where + e.where().substring("config.json".length()), e.getMessage(), e.hint()) : e;
        } catch (NumberFormatException | UnsupportedOperationException | IllegalStateException | ClassCastException e) {
            throw new UserError(where, "a value has the wrong type (" + jsonProblem(e) + ")",
                    "numbers must be JSON numbers and names JSON strings, as in the model's original config.json");
        }
    }

    private static ModelConfig fromJsonUnchecked(JsonObject json, String where) {
        String type = string(json, "model_type", "llama");
        int hidden = requiredInt(json, "hidden_size", where);
        int heads = requiredInt(json, "num_attention_heads", where);
        int kvHeads = optionalInt(json, "num_key_value_heads", heads);
        int headDim = optionalInt(json, "head_dim", heads > 0 ? hidden / heads : 0);
        RopeScaling scaling = null;
        JsonElement rs = json.get("rope_scaling");
        if (rs != null && rs.isJsonObject()) {
            JsonObject o = rs.getAsJsonObject();
            String kind = string(o, "rope_type", string(o, "type", "default"));
            scaling = new RopeScaling(kind, dbl(o, "factor", 1.0), dbl(o, "low_freq_factor", 1.0),
                    dbl(o, "high_freq_factor", 4.0), optionalInt(o, "original_max_position_embeddings", 8192));
        }
        boolean gemma = type.startsWith("gemma2") || type.startsWith("gemma3");
        boolean qwen2 = type.equals("qwen2") || type.equals("qwen2_moe");
        return new ModelConfig(
                type,
                hidden,
                requiredInt(json, "intermediate_size", where),
                requiredInt(json, "num_hidden_layers", where),
                heads,
                kvHeads,
                headDim,
                requiredInt(json, "vocab_size", where),
                optionalInt(json, "max_position_embeddings", 2048),
                dbl(json, "rms_norm_eps", 1e-6),
                dbl(json, "rope_theta", 10000.0),
                scaling,
                bool(json, "attention_bias", qwen2),
                bool(json, "mlp_bias", false),
                type.startsWith("qwen3"),
                gemma ? 4 : 2,
                bool(json, "tie_word_embeddings", gemma),
                optionalInt(json, "num_local_experts", 0),
                optionalInt(json, "num_experts_per_tok", 0),
                string(json, "torch_dtype", "float32"),
                nullableInt(json, "bos_token_id"),
                nullableInt(json, "eos_token_id"));
    }

    private static void bounded(String where, String key, int value, int max) {
        if (value <= 0 || value > max) {
            throw new UserError(where + ": " + key, key + " must be from 1 to " + max + ", got " + value,
                    "fix or restore the model's config.json");
        }
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
