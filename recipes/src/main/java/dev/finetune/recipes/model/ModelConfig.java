package dev.finetune.recipes.model;

import com.google.gson.JsonObject;
import dev.finetune.recipes.UserError;
import java.nio.file.Path;
import java.util.List;

/**
 * The architecture of a decoder-only transformer, as a Hugging Face {@code config.json} describes it.
 *
 * <p>One record for both uses: the memory model counts parameters from it, the trainer builds the network from
 * it. Field names follow the config keys so a reader can check them against the file. What a key means, and its
 * default when the file leaves it out, can differ by family (Qwen2's q/k/v biases need no key, Gemma ties its head
 * unless told otherwise): {@link #fromJson} resolves them with the {@link Family} ({@link ConfigJsonReader}), so
 * every other reader sees plain facts.
 *
 * @param family the architecture, from {@code model_type}
 * @param headDim per-head width; {@code hiddenSize / numAttentionHeads} unless the config (or the family's default) says otherwise
 * @param attentionBias q/k/v projections carry a bias (Qwen2 always; {@code attention_bias} in Llama-style configs)
 * @param outputBias the attention output projection carries a bias ({@code attention_bias} in Llama-style configs)
 * @param experts the mixture of experts; {@code null} for a dense model
 * @param slidingWindow the layers that attend within a window; {@code null} when every layer attends fully
 * @param ropeScaling {@code null} when the config has none
 */
public record ModelConfig(
        Family family,
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
        boolean outputBias,
        boolean mlpBias,
        boolean tieWordEmbeddings,
        Experts experts,
        SlidingWindow slidingWindow,
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

    /**
     * A mixture of experts in place of the MLP.
     *
     * @param count experts per MoE layer ({@code num_local_experts} / {@code num_experts})
     * @param perToken experts each token is routed to ({@code num_experts_per_tok})
     * @param intermediateSize each expert's width ({@code moe_intermediate_size}; Mixtral's {@code intermediate_size})
     * @param sharedIntermediateSize the shared expert's width (Qwen2-MoE); 0 when there is none
     * @param sparseLayers which decoder layers have experts (the others a dense MLP of {@code intermediate_size})
     * @param routerAuxLossCoef weight of the load-balancing loss ({@code router_aux_loss_coef})
     * @param outputRouterLogits whether the model adds that loss when it computes its own ({@code output_router_logits})
     */
    public record Experts(int count, int perToken, int intermediateSize, int sharedIntermediateSize,
            List<Boolean> sparseLayers, double routerAuxLossCoef, boolean outputRouterLogits) {
        public Experts {
            sparseLayers = List.copyOf(sparseLayers);
        }

        public boolean sparse(int layer) {
            return sparseLayers.get(layer);
        }
    }

    /**
     * Sliding-window attention: a query attends to itself and the {@code size - 1} keys before it, in the layers
     * listed; the others attend to the whole prefix.
     */
    public record SlidingWindow(int size, List<Boolean> layers) {
        public SlidingWindow {
            layers = List.copyOf(layers);
        }

        public boolean slides(int layer) {
            return layers.get(layer);
        }

        public long slidingLayers() {
            return layers.stream().filter(b -> b).count();
        }
    }

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
        if (experts != null) {
            bounded(where, "num_local_experts", experts.count(), 4096);
            bounded(where, "num_experts_per_tok", experts.perToken(), experts.count());
            bounded(where, "moe_intermediate_size", experts.intermediateSize(), 1 << 20);
            if (experts.sharedIntermediateSize() < 0 || experts.sparseLayers().size() != numHiddenLayers) {
                throw new UserError(where + ": shared_expert_intermediate_size", "the expert layout does not fit "
                        + numHiddenLayers + " layers", "fix or restore the model's config.json");
            }
        }
        if (slidingWindow != null) {
            bounded(where, "sliding_window", slidingWindow.size(), 1 << 24);
            if (slidingWindow.layers().size() != numHiddenLayers) {
                throw new UserError(where + ": layer_types", "layer_types has " + slidingWindow.layers().size()
                        + " entries for " + numHiddenLayers + " layers", "fix or restore the model's config.json");
            }
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

    /** The {@code model_type} this config was read as. */
    public String modelType() {
        return family.modelType();
    }

    /** Experts per MoE layer; 0 for a dense model. */
    public int numLocalExperts() {
        return experts == null ? 0 : experts.count();
    }

    /** Experts each token is routed to; 0 for a dense model. */
    public int numExpertsPerToken() {
        return experts == null ? 0 : experts.perToken();
    }

    /** How q and k are normalised before RoPE, if at all. */
    public Family.QkNorm qkNorm() {
        return family.qkNorm();
    }

    /** Norm operations per decoder layer. */
    public int normsPerLayer() {
        return family.normsPerLayer();
    }

    /**
     * Why the single-device (in-JVM) trainer cannot run this model, or {@code null} when it can: it implements the
     * families {@link Family#inJvm()} names, and sliding-window attention only where every layer slides (Mistral),
     * since one mask serves all its layers.
     */
    public String notInJvmBecause() {
        if (!family.inJvm()) {
            return "the single-device (in-JVM) trainer implements " + Family.jvmFamilies().stream().map(Family::modelType)
                    .collect(java.util.stream.Collectors.joining(", ")) + ", not " + modelType() + " (" + family.models() + ")";
        }
        if (slidingWindow != null && slidingWindow.slidingLayers() != numHiddenLayers) {
            return "the single-device (in-JVM) trainer runs sliding-window attention in every layer or none; this "
                    + modelType() + " config slides in " + slidingWindow.slidingLayers() + " of " + numHiddenLayers;
        }
        return null;
    }

    /** How many keys a query at position {@code t} attends in layer {@code layer} (itself included). */
    public long keysAttended(int layer, long t) {
        long all = t + 1;
        return slidingWindow != null && slidingWindow.slides(layer) ? Math.min(all, slidingWindow.size()) : all;
    }

    /** Reads and validates {@code dir/config.json}. */
    public static ModelConfig read(Path dir) {
        return ConfigJsonReader.read(dir);
    }

    /** {@code dir/config.json} as the recipe's {@code overrides_of_model_config} changes it ({@link ConfigOverrides}). */
    public static ModelConfig read(Path dir, java.util.Map<String, Object> overrides) {
        return ConfigJsonReader.read(dir, overrides);
    }

    /** {@code dir/config.json} as written, parsed (its errors as {@link #read} reports them). */
    public static JsonObject json(Path dir) {
        return ConfigJsonReader.json(dir);
    }

    /** A JSON parser's complaint without the library's class names and links ({@link JsonProblems}). */
    public static String jsonProblem(RuntimeException e) {
        return dev.finetune.recipes.JsonProblems.reason(e);
    }

    /** Builds the record from a parsed {@code config.json}; {@code where} names the source in error messages. */
    public static ModelConfig fromJson(JsonObject json, String where) {
        return ConfigJsonReader.fromJson(json, where);
    }

    private static void bounded(String where, String key, int value, int max) {
        if (value <= 0 || value > max) {
            throw new UserError(where + ": " + key, key + " must be from 1 to " + max + ", got " + value,
                    "fix or restore the model's config.json");
        }
    }
}
