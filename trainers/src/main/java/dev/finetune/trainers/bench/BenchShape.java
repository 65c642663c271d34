package dev.finetune.trainers.bench;

import com.google.gson.JsonParser;
import dev.finetune.recipes.model.ModelConfig;
import java.util.Locale;

/** The peer benchmark's ({@code shared/bench/peer_torch.py}) TINY, SMALL and MEDIUM, with its default timed and warm-up step counts. */
public enum BenchShape {
    TINY(512, 64, 5, 8, 4, 172, 256, 8, 30, 3),
    SMALL(4096, 256, 4, 4, 4, 688, 256, 8, 12, 2),
    MEDIUM(32000, 512, 8, 8, 8, 1376, 512, 4, 6, 1);

    public final int vocab;
    public final int dim;
    public final int layers;
    public final int heads;
    public final int kvHeads;
    public final int ffn;
    public final int seq;
    public final int batch;
    public final int steps;
    public final int warmupSteps;

    BenchShape(int vocab, int dim, int layers, int heads, int kvHeads, int ffn, int seq, int batch, int steps,
            int warmupSteps) {
        this.vocab = vocab;
        this.dim = dim;
        this.layers = layers;
        this.heads = heads;
        this.kvHeads = kvHeads;
        this.ffn = ffn;
        this.seq = seq;
        this.batch = batch;
        this.steps = steps;
        this.warmupSteps = warmupSteps;
    }

    /** The shape as a Hugging Face {@code config.json}, so a random model of it can also be saved and loaded. */
    public String configJson() {
        return String.format(Locale.ROOT, """
                {"model_type": "llama", "vocab_size": %d, "hidden_size": %d, "num_hidden_layers": %d,
                 "num_attention_heads": %d, "num_key_value_heads": %d, "intermediate_size": %d,
                 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": %d,
                 "tie_word_embeddings": false, "torch_dtype": "float32"}""",
                vocab, dim, layers, heads, kvHeads, ffn, Math.max(seq, 2048));
    }

    public ModelConfig config() {
        return ModelConfig.fromJson(JsonParser.parseString(configJson()).getAsJsonObject(), name().toLowerCase(Locale.ROOT));
    }

    /** Weights of every matmul (decoder projections and head), the peer's {@code matmul_params}. */
    public long matmulParams() {
        long headDim = dim / heads;
        long perLayer = 2L * dim * heads * headDim + 2L * dim * kvHeads * headDim + 3L * dim * ffn;
        return perLayer * layers + (long) dim * vocab;
    }
}
