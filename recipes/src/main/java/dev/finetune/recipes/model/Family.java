package dev.finetune.recipes.model;

import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.stream.Collectors;

/**
 * The decoder-only architectures finetune knows, one per Hugging Face {@code model_type}, with how each builds its
 * layers in transformers (checked against {@code num_parameters()} of tiny random models of each family by
 * {@code FamilyParameterCountTest}).
 *
 * <p>What differs between families is small and structural: fused or separate projections, which of them carry
 * biases, extra norms, a mixture of experts instead of the MLP, which layers attend within a sliding window. Each is a
 * switch here, so {@link ModelParameters} and the plan read one trait at a time instead of testing names.
 */
public enum Family {
    LLAMA("llama", "Llama 2/3/3.1/3.2, SmolLM2, TinyLlama, Yi", true),
    MISTRAL("mistral", "Mistral", true),
    QWEN2("qwen2", "Qwen2/2.5", true),
    QWEN3("qwen3", "Qwen3", true),
    MIXTRAL("mixtral", "Mixtral (MoE)", false),
    QWEN2_MOE("qwen2_moe", "Qwen1.5/2-MoE", false),
    QWEN3_MOE("qwen3_moe", "Qwen3-MoE", false),
    GEMMA2("gemma2", "Gemma 2", false),
    GEMMA3("gemma3_text", "Gemma 3 (text)", false),
    PHI3("phi3", "Phi-3/3.5/4", false),
    OLMO("olmo", "OLMo", false),
    OLMO2("olmo2", "OLMo 2", false),
    OLMO3("olmo3", "OLMo 3", false),
    GRANITE("granite", "Granite 3.x", false);

    private final String modelType;
    private final String models;
    private final boolean inJvm;

    Family(String modelType, String models, boolean inJvm) {
        this.modelType = modelType;
        this.models = models;
        this.inJvm = inJvm;
    }

    /** The {@code model_type} of the family's {@code config.json}. */
    public String modelType() {
        return modelType;
    }

    /** The released models this family covers, for messages. */
    public String models() {
        return models;
    }

    /**
     * Whether the in-JVM trainer implements this family's forward pass. The worker (transformers) runs them all.
     */
    public boolean inJvm() {
        return inJvm;
    }

    /** The trainers that can run this family, for messages and the docs' family table. */
    public String trainers() {
        return inJvm ? "single (in-JVM), fsdp (worker)" : "fsdp (worker, world size 1 or more)";
    }

    public static Optional<Family> of(String modelType) {
        return Arrays.stream(values()).filter(f -> f.modelType.equals(modelType)).findFirst();
    }

    /** {@code llama, mistral, ...}: what an error about an unknown architecture lists. */
    public static String supportedList() {
        return Arrays.stream(values()).map(Family::modelType).collect(Collectors.joining(", "));
    }

    /**
     * The last name of every linear module a LoRA target can name in any family ({@code q_proj}, {@code qkv_proj},
     * {@code gate_up_proj}, experts, routers, {@code lm_head}): read off a two-layer model of each family, so it is
     * whatever {@link ModelParameters#linearModules} says, never a second list.
     */
    public static java.util.SortedSet<String> linearNames() {
        java.util.TreeSet<String> names = new java.util.TreeSet<>();
        for (Family f : values()) {
            com.google.gson.JsonObject json = com.google.gson.JsonParser.parseString("""
                    {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                     "num_key_value_heads": 1, "vocab_size": 32, "num_local_experts": 2, "num_experts": 2,
                     "num_experts_per_tok": 1, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 8}
                    """).getAsJsonObject();
            json.addProperty("model_type", f.modelType);
            for (String module : ModelConfig.fromJson(json, f.modelType).parameters().linearModules()) {
                names.add(module.substring(module.lastIndexOf('.') + 1));
            }
        }
        return names;
    }

    /** The single-device trainer's families. */
    public static List<Family> jvmFamilies() {
        return Arrays.stream(values()).filter(Family::inJvm).toList();
    }

    /** How q, k and v are projected. */
    public boolean fusedQkv() {
        return this == PHI3;
    }

    /** How the gated MLP's two input projections are stored. */
    public boolean fusedGateUp() {
        return this == PHI3;
    }

    /** Which projections a bias can sit on: Qwen2 has q/k/v biases always; Llama-style configs say so for all four. */
    public enum Biases {
        /** No bias anywhere (Mistral, Mixtral, Phi-3). */
        NONE,
        /** q, k, v always (Qwen2). */
        QKV_ALWAYS,
        /** q, k, v when {@code qkv_bias} (default true; Qwen2-MoE). */
        QKV_BY_CONFIG,
        /** q, k, v and o when {@code attention_bias}. */
        ALL_BY_CONFIG
    }

    public Biases attentionBiases() {
        return switch (this) {
            case MISTRAL, MIXTRAL, PHI3 -> Biases.NONE;
            case QWEN2 -> Biases.QKV_ALWAYS;
            case QWEN2_MOE -> Biases.QKV_BY_CONFIG;
            default -> Biases.ALL_BY_CONFIG;
        };
    }

    /** Whether {@code mlp_bias} exists for this family (Llama, Granite). */
    public boolean mlpBiasByConfig() {
        return this == LLAMA || this == GRANITE;
    }

    /** Norms on the queries and keys before RoPE. */
    public enum QkNorm {
        NONE,
        /** One RMSNorm over {@code head_dim}, shared by the heads (Qwen3, Gemma 3). */
        PER_HEAD,
        /** One RMSNorm over all query (key) heads together (OLMo 2/3). */
        FULL_WIDTH
    }

    public QkNorm qkNorm() {
        return switch (this) {
            case QWEN3, QWEN3_MOE, GEMMA3 -> QkNorm.PER_HEAD;
            case OLMO2, OLMO3 -> QkNorm.FULL_WIDTH;
            default -> QkNorm.NONE;
        };
    }

    /** The norm weights of one decoder layer, by Hugging Face name. OLMo's LayerNorm has no weights. */
    public List<String> layerNorms() {
        return switch (this) {
            case GEMMA2, GEMMA3 -> List.of("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                    "post_feedforward_layernorm");
            case OLMO2, OLMO3 -> List.of("post_attention_layernorm", "post_feedforward_layernorm");
            case OLMO -> List.of();
            default -> List.of("input_layernorm", "post_attention_layernorm");
        };
    }

    /** Norm operations per decoder layer, weighted or not: what the activations count. */
    public int normsPerLayer() {
        return this == OLMO ? 2 : layerNorms().size();
    }

    /** Whether {@code model.norm} has a weight (OLMo's final LayerNorm has none). */
    public boolean finalNormWeight() {
        return this != OLMO;
    }

    /** The head shares the embedding unless {@code tie_word_embeddings} says otherwise. */
    public boolean tiedByDefault() {
        return this == GEMMA2 || this == GEMMA3;
    }

    /** {@code head_dim} when config.json leaves it out, as the family's config class defaults it. */
    public int defaultHeadDim(int hidden, int heads) {
        return switch (this) {
            case QWEN3 -> 128;
            case GEMMA2, GEMMA3 -> 256;
            default -> heads > 0 ? hidden / heads : 0;
        };
    }

    /** What replaces the MLP. */
    public enum Mlp {
        /** gate, up, down ({@code mlp.gate_proj} ...). */
        GATED,
        /** Experts behind a top-k router; every layer. */
        EXPERTS,
        /** Experts on the layers {@code decoder_sparse_step}/{@code mlp_only_layers} choose, dense MLPs elsewhere. */
        EXPERTS_SOME_LAYERS,
        /** {@link #EXPERTS_SOME_LAYERS} plus one shared expert and its sigmoid gate (Qwen2-MoE). */
        EXPERTS_AND_SHARED
    }

    public Mlp mlp() {
        return switch (this) {
            case MIXTRAL -> Mlp.EXPERTS;
            case QWEN3_MOE -> Mlp.EXPERTS_SOME_LAYERS;
            case QWEN2_MOE -> Mlp.EXPERTS_AND_SHARED;
            default -> Mlp.GATED;
        };
    }

    /** How the config says which layers attend within {@code sliding_window}. */
    public enum Windows {
        /** Full causal attention everywhere. */
        NONE,
        /** Every layer, when {@code sliding_window} is set (Mistral, Mixtral, Phi-3). */
        ALL_WHEN_SET,
        /** Every layer, when {@code use_sliding_window} and {@code sliding_window} (Qwen3-MoE). */
        ALL_WHEN_USED,
        /** {@code layer_types}, else layers from {@code max_window_layers} on when {@code use_sliding_window} (Qwen2/3). */
        FROM_MAX_WINDOW_LAYERS,
        /** {@code layer_types}, else odd-numbered (1-based) layers below {@code max_window_layers} when used (Qwen2-MoE). */
        ODD_BELOW_MAX_WINDOW_LAYERS,
        /** {@code layer_types}, else every layer but each {@code n}-th ({@link #fullAttentionEvery}). */
        PATTERN
    }

    public Windows windows() {
        return switch (this) {
            case MISTRAL, MIXTRAL, PHI3 -> Windows.ALL_WHEN_SET;
            case QWEN3_MOE -> Windows.ALL_WHEN_USED;
            case QWEN2, QWEN3 -> Windows.FROM_MAX_WINDOW_LAYERS;
            case QWEN2_MOE -> Windows.ODD_BELOW_MAX_WINDOW_LAYERS;
            case GEMMA2, GEMMA3, OLMO3 -> Windows.PATTERN;
            default -> Windows.NONE;
        };
    }

    /** For {@link Windows#PATTERN}: layer {@code i} attends fully when {@code (i + 1) % n == 0}. */
    public int fullAttentionEvery() {
        return switch (this) {
            case GEMMA2 -> 2;
            case GEMMA3 -> 6;
            case OLMO3 -> 4;
            default -> 1;
        };
    }

    /** {@code sliding_window} when config.json leaves it out, as the family's config class defaults it. */
    public Integer defaultSlidingWindow() {
        return switch (this) {
            case MISTRAL, GEMMA2, GEMMA3, OLMO3, QWEN2, QWEN3, QWEN2_MOE, QWEN3_MOE -> 4096;
            default -> null;
        };
    }
}
