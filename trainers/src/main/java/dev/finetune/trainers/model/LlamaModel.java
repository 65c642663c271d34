package dev.finetune.trainers.model;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.Scalars;
import dev.finetune.adapters.io.SafetensorsReader;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.Family;
import dev.finetune.recipes.model.ModelConfig;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * A decoder-only Llama-family transformer (Llama 2/3.x, Mistral with its sliding window, Qwen2/2.5, Qwen3, SmolLM2,
 * TinyLlama: the families {@link Family#inJvm()} names).
 *
 * <p>Every tensor carries its Hugging Face checkpoint name, so loading is a lookup and saving writes the same names
 * back. The pieces of {@link #forward} are public so a training loop can checkpoint activations layer by layer:
 * {@link #embed}, {@link #rotary()}, {@link #attentionMask}, {@link #layers()}, {@link #finalNormAndHead}.
 * All of it is safe to differentiate: constants come from {@link Scalars}, never from Java numbers.
 */
public final class LlamaModel {

    private final ModelConfig config;
    private final NDManager manager;
    private final Scalars scalars;
    private final NamedArray embedding;
    private final List<DecoderLayer> layers;
    private final RmsNorm finalNorm;
    private final Projection head;
    private final RotaryEmbedding rotary;
    private final boolean embeddingsAndNormsTrained;
    private final Map<String, NDArray> weights;
    private final NDArray one;
    private final NDArray maskedOut;
    private final LayerScripts scripts;

    /**
     * @param source gives each tensor by name when the layer that needs it is built, so a QLoRA factory can quantise
     *     and free one float32 weight before the next is read: loading never holds the whole float32 model
     */
    private LlamaModel(ModelConfig config, NDManager manager, Function<String, NDArray> source, LoadOptions options) {
        this.config = config;
        this.manager = manager;
        Map<String, NDArray> fetched = new LinkedHashMap<>();
        Function<String, NDArray> weights = name -> fetched.computeIfAbsent(name, source);
        this.weights = Collections.unmodifiableMap(fetched);
        this.embeddingsAndNormsTrained = options.trainEmbeddingsAndNorms();
        this.scalars = new Scalars(manager);
        this.one = scalars.of(1f);
        // Large but finite: a row whose every key is masked (never produced here) would give a uniform average, not NaN.
        this.maskedOut = scalars.of(1e30f);
        this.rotary = new RotaryEmbedding(config, manager);
        this.scripts = new LayerScripts(manager);
        float eps = (float) config.rmsNormEps();
        Function<String, NamedArray> embeddingOrNorm = name -> {
            NDArray w = weights.apply(name);
            if (options.trainEmbeddingsAndNorms()) {
                w.setRequiresGradient(true);
            }
            return new NamedArray(name, w);
        };
        this.embedding = embeddingOrNorm.apply("model.embed_tokens.weight");
        List<DecoderLayer> built = new ArrayList<>();
        for (int i = 0; i < config.numHiddenLayers(); i++) {
            String p = "model.layers." + i + ".";
            boolean qkNorm = config.qkNorm() == Family.QkNorm.PER_HEAD;
            Projection[] attention = {
                projection(options, weights, p + "self_attn.q_proj", config.attentionBias()),
                projection(options, weights, p + "self_attn.k_proj", config.attentionBias()),
                projection(options, weights, p + "self_attn.v_proj", config.attentionBias()),
                projection(options, weights, p + "self_attn.o_proj", config.outputBias()),
            };
            Projection[] mlp = {
                projection(options, weights, p + "mlp.gate_proj", config.mlpBias()),
                projection(options, weights, p + "mlp.up_proj", config.mlpBias()),
                projection(options, weights, p + "mlp.down_proj", config.mlpBias()),
            };
            built.add(new DecoderLayer(i, config.numAttentionHeads(), config.numKeyValueHeads(), config.headDim(),
                    new RmsNorm(embeddingOrNorm.apply(p + "input_layernorm.weight"), eps, scalars),
                    new RmsNorm(embeddingOrNorm.apply(p + "post_attention_layernorm.weight"), eps, scalars),
                    qkNorm ? new RmsNorm(embeddingOrNorm.apply(p + "self_attn.q_norm.weight"), eps, scalars) : null,
                    qkNorm ? new RmsNorm(embeddingOrNorm.apply(p + "self_attn.k_norm.weight"), eps, scalars) : null,
                    attention, mlp, scalars, scripts));
        }
        this.layers = List.copyOf(built);
        this.finalNorm = new RmsNorm(embeddingOrNorm.apply("model.norm.weight"), eps, scalars);
        this.head = config.tieWordEmbeddings() ? null : projection(options, weights, "lm_head", false);
    }

    private static Projection projection(LoadOptions options, Function<String, NDArray> weights, String name, boolean bias) {
        return options.projections().create(name, weights.apply(name + ".weight"), bias ? weights.apply(name + ".bias") : null);
    }

    /** Reads {@code dir/config.json} and its safetensors weights into {@code manager}, which then owns them. */
    public static LlamaModel load(Path dir, NDManager manager, LoadOptions options) {
        ModelConfig config = ModelConfig.read(dir);
        requireSupported(config, dir.resolve("config.json").toString());
        Map<String, Shape> expected = expectedShapes(config);
        try (SafetensorsReader reader = SafetensorsReader.open(dir)) {
            Map<String, Shape> present = new LinkedHashMap<>(expected);
            for (String name : reader.names()) {
                if (!expected.containsKey(name) && ignorable(name, config)) {
                    present.put(name, reader.entry(name).shape());
                }
            }
            reader.requireExactly(present);
            Function<String, NDArray> read = name -> options.mapWeights() ? reader.mapReadOnly(name, manager) : reader.load(name, manager);
            return new LlamaModel(config, manager, read, options);
        }
    }

    /** Buffers some exports carry that hold nothing the model needs. */
    private static boolean ignorable(String name, ModelConfig config) {
        return name.endsWith(".rotary_emb.inv_freq") || (config.tieWordEmbeddings() && name.equals("lm_head.weight"));
    }

    /** Builds a model from arrays already named and shaped as {@link #expectedShapes} says (random init, tests, merges). */
    public static LlamaModel fromWeights(ModelConfig config, NDManager manager, Map<String, NDArray> weights, LoadOptions options) {
        requireSupported(config, "config");
        for (Map.Entry<String, Shape> e : expectedShapes(config).entrySet()) {
            NDArray w = weights.get(e.getKey());
            if (w == null || !w.getShape().equals(e.getValue()) || w.getDataType() != DataType.FLOAT32) {
                throw new IllegalArgumentException("weight '" + e.getKey() + "' must be float32 " + e.getValue() + ", got "
                        + (w == null ? "nothing" : w.getDataType() + " " + w.getShape()));
            }
        }
        return new LlamaModel(config, manager, weights::get, options);
    }

    static void requireSupported(ModelConfig config, String where) {
        String unsupported = config.notInJvmBecause();
        if (unsupported != null) {
            throw new UserError(where + ": model_type", unsupported, "the fsdp backend (the transformers worker) runs it, "
                    + "at world size 1 too: backend: fsdp, or backend: auto, which picks it for such a model");
        }
        if (config.headDim() % 2 != 0) {
            throw new UserError(where + ": head_dim", "head_dim " + config.headDim() + " is odd; rotary embeddings need pairs",
                    "check config.json");
        }
    }

    /** Every tensor a checkpoint of this architecture holds, by Hugging Face name, in the order HF saves them. */
    public static Map<String, Shape> expectedShapes(ModelConfig c) {
        Map<String, Shape> shapes = new LinkedHashMap<>();
        long hidden = c.hiddenSize();
        long qWidth = (long) c.numAttentionHeads() * c.headDim();
        long kvWidth = (long) c.numKeyValueHeads() * c.headDim();
        shapes.put("model.embed_tokens.weight", new Shape(c.vocabSize(), hidden));
        for (int i = 0; i < c.numHiddenLayers(); i++) {
            String p = "model.layers." + i + ".";
            shapes.put(p + "input_layernorm.weight", new Shape(hidden));
            linear(shapes, p + "self_attn.q_proj", qWidth, hidden, c.attentionBias());
            linear(shapes, p + "self_attn.k_proj", kvWidth, hidden, c.attentionBias());
            linear(shapes, p + "self_attn.v_proj", kvWidth, hidden, c.attentionBias());
            linear(shapes, p + "self_attn.o_proj", hidden, qWidth, c.outputBias());
            if (c.qkNorm() == Family.QkNorm.PER_HEAD) {
                shapes.put(p + "self_attn.q_norm.weight", new Shape(c.headDim()));
                shapes.put(p + "self_attn.k_norm.weight", new Shape(c.headDim()));
            }
            shapes.put(p + "post_attention_layernorm.weight", new Shape(hidden));
            linear(shapes, p + "mlp.gate_proj", c.intermediateSize(), hidden, c.mlpBias());
            linear(shapes, p + "mlp.up_proj", c.intermediateSize(), hidden, c.mlpBias());
            linear(shapes, p + "mlp.down_proj", hidden, c.intermediateSize(), c.mlpBias());
        }
        shapes.put("model.norm.weight", new Shape(hidden));
        if (!c.tieWordEmbeddings()) {
            shapes.put("lm_head.weight", new Shape(c.vocabSize(), hidden));
        }
        return shapes;
    }

    private static void linear(Map<String, Shape> shapes, String name, long out, long in, boolean bias) {
        shapes.put(name + ".weight", new Shape(out, in));
        if (bias) {
            shapes.put(name + ".bias", new Shape(out));
        }
    }

    public ModelConfig config() {
        return config;
    }

    /**
     * Whether each decoder layer runs as one compiled TorchScript module (the default) or op by op from Java.
     * Both compute the same ops in the same order; the switch exists to compare them. The system property
     * {@code finetune.scripted-layers=false} starts a model with it off.
     */
    public void setScriptedLayers(boolean scripted) {
        scripts.setEnabled(scripted);
    }

    /**
     * Training computes in bfloat16 mixed precision (the recipe's {@code bf16: true}): matrix multiplies and
     * attention in bfloat16 on the CPU's bfloat16 units, everything else and every stored weight, gradient and
     * optimizer state in float32, as torch's CPU autocast does. Needs the compiled layers; generation keeps float32.
     */
    public void setBfloat16Compute(boolean bfloat16) {
        scripts.setBfloat16(bfloat16);
    }

    /** Whether {@link #setBfloat16Compute} is on and the compiled layers that carry it out are too. */
    public boolean bfloat16Compute() {
        return scripts.bfloat16() && scripts.enabled();
    }

    /** The manager that owns the weights and the model's constants. */
    public NDManager manager() {
        return manager;
    }

    public Scalars scalars() {
        return scalars;
    }

    public RotaryEmbedding rotary() {
        return rotary;
    }

    public List<DecoderLayer> layers() {
        return layers;
    }

    /**
     * Every checkpoint tensor by Hugging Face name, as it was handed to the model: the base weights for full
     * fine-tuning, saving and merging. A projection factory that replaces its input (QLoRA) may have closed it.
     */
    public Map<String, NDArray> weights() {
        return weights;
    }

    /** The arrays an optimizer updates, with the names they are saved under. */
    public List<NamedArray> trainable() {
        List<NamedArray> params = new ArrayList<>();
        if (embeddingsAndNormsTrained) {
            params.add(embedding);
        }
        for (DecoderLayer layer : layers) {
            params.addAll(layer.trainable(embeddingsAndNormsTrained));
        }
        if (embeddingsAndNormsTrained) {
            params.add(finalNorm.weight());
        }
        if (head != null) {
            params.addAll(head.trainable());
        }
        return params;
    }

    /** {@code ids [B, T]} int64 → {@code [B, T, C]}. */
    public NDArray embed(NDArray inputIds) {
        return JniUtils.embedding((PtNDArray) inputIds, (PtNDArray) embedding.array(), false);
    }

    /** {@code hidden [B, T, C]} → logits {@code [B, T, V]}. */
    public NDArray finalNormAndHead(NDArray hidden) {
        NDArray normed = finalNorm.forward(hidden);
        if (bfloat16Compute()) {
            LayerScripts.Arguments arguments = new LayerScripts.Arguments(normed.getManager(), true);
            arguments.named("normed", normed);
            String logits = head == null
                    ? PlainProjection.linear("xb", arguments.operand(embedding.array()), "None")
                    : head.script("xb", arguments);
            if (logits != null) {
                // float32 logits: the loss reads them in float32, as autocast runs cross-entropy
                // projections take [tokens, in] (Projection#script); the logits go back to [B, T, V]
                return scripts.run(arguments.module("    xb = " + LayerScripts.Arguments.toBfloat16(
                        "torch.flatten(normed, 0, 1)") + "\n    return torch.reshape(" + LayerScripts.Arguments.toFloat32(
                        logits) + ", [normed.size(0), normed.size(1), -1])\n"), arguments);
            }
        }
        return head == null ? tiedHead(normed) : head.forward(normed);
    }

    /** The final norm alone: {@code hidden [B, T, C]} → the LM head's input. */
    public NDArray finalNorm(NDArray hidden) {
        return finalNorm.forward(hidden);
    }

    /**
     * The LM head's {@code [V, C]} matrix when the head is that matrix alone, applied in float32 (the tied
     * embedding, or an {@code lm_head} without adapter or bias): then a loss can apply it itself
     * ({@code TokenScores.sftThroughHead}). {@code null} otherwise.
     */
    public NDArray plainHeadWeight() {
        if (bfloat16Compute()) {
            return null;
        }
        if (head == null) {
            return embedding.array();
        }
        return head instanceof PlainProjection plain && plain.bias() == null ? plain.weight() : null;
    }

    /** {@link #finalNormAndHead} for generation, computed as transformers and PEFT compute it ({@link RmsNorm#infer}). */
    public NDArray inferHead(NDArray hidden) {
        NDArray normed = finalNorm.infer(hidden);
        return head == null ? tiedHead(normed) : head.infer(normed);
    }

    private NDArray tiedHead(NDArray normed) {
        return JniUtils.linear((PtNDArray) normed, (PtNDArray) embedding.array(), null);
    }

    /**
     * Additive attention mask {@code [B or 1, 1, T, T]} for {@code inputIds [B, T]}: 0 where a token may attend, -1e30 elsewhere. A token sees
     * itself and earlier tokens of the same row; with {@code segmentIds [B, T]} (sample packing) only those of its
     * own segment, so packed samples never see each other. Give padding a segment of its own.
     */
    public NDArray attentionMask(NDArray inputIds, NDArray segmentIds) {
        int length = Math.toIntExact(inputIds.getShape().get(1));
        NDArray slots = inputIds.getManager().arange(0, length, 1, DataType.INT64);
        return mask(slots, slots, segmentIds, segmentIds);
    }

    /**
     * Whether the mask of a {@code length}-token row without packing is the plain causal one: no sliding window, or a
     * window no shorter than the row.
     */
    public boolean windowCoversAll(long length) {
        return config.slidingWindow() == null || length <= config.slidingWindow().size();
    }

    /**
     * The general form used with a KV cache: query slot numbers {@code [Tq]} against key slot numbers {@code [Tk]},
     * with the segment ids of the query tokens {@code [B, Tq]} and of the key slots {@code [B, Tk]} (both or neither).
     */
    public NDArray mask(NDArray querySlots, NDArray keySlots, NDArray querySegments, NDArray keySegments) {
        NDArray allowed = keySlots.expandDims(0).lte(querySlots.expandDims(1)).expandDims(0);
        if (config.slidingWindow() != null) {
            // transformers' sliding_window_overlay: key k is visible from query q when q - k < window. Slots are
            // positions within a row's segment (packing restarts both), so the window never crosses into another.
            NDArray recent = keySlots.expandDims(0).add(config.slidingWindow().size()).gt(querySlots.expandDims(1));
            allowed = allowed.logicalAnd(recent.expandDims(0));
        }
        if (querySegments != null) {
            NDArray sameSegment = querySegments.expandDims(2).eq(keySegments.expandDims(1));
            allowed = allowed.logicalAnd(sameSegment);
        }
        // (allowed - 1) · 1e30 → 0 or -1e30; written with tensor constants, as everything near the graph must be.
        return allowed.toType(DataType.FLOAT32, false).sub(one).mul(maskedOut).expandDims(1);
    }

    /**
     * Logits {@code [B, T, V]} for {@code inputIds [B, T]} at {@code positionIds [B, T]} (int64). With
     * {@code segmentIds [B, T]} a token attends only to earlier tokens of its own segment; {@code null} means one
     * causal sequence per row.
     */
    public NDArray forward(NDArray inputIds, NDArray positionIds, NDArray segmentIds) {
        NDArray hidden = embed(inputIds);
        RotaryEmbedding.Angles angles = rotary.at(positionIds);
        NDArray mask = attentionMask(inputIds, segmentIds);
        for (DecoderLayer layer : layers) {
            hidden = layer.forward(hidden, angles, mask);
        }
        return finalNormAndHead(hidden);
    }

    /**
     * Hidden states after the last layer for new tokens, appending their keys and values to {@code cache}; {@code mask}
     * is {@code [B, 1, new, filled + new]} as {@link #mask} makes it for the cache's slots.
     */
    public NDArray hiddenWithCache(NDArray inputIds, NDArray positionIds, NDArray mask, KvCache cache) {
        NDArray hidden = embed(inputIds);
        RotaryEmbedding.Angles angles = rotary.at(positionIds);
        for (DecoderLayer layer : layers) {
            hidden = layer.infer(hidden, angles, mask, cache);
        }
        cache.advance(Math.toIntExact(inputIds.getShape().get(1)));
        return hidden;
    }

    /** An empty cache for {@code batch} rows of up to {@code capacity} tokens, owned by {@code owner}. */
    public KvCache newCache(NDManager owner, int batch, int capacity) {
        return new KvCache(owner, layers.size(), batch, config.numKeyValueHeads(), capacity, config.headDim());
    }

    /** Bytes the weights take as float32. */
    public long weightBytes() {
        return weights.values().stream().mapToLong(w -> w.size() * 4).sum();
    }
}
