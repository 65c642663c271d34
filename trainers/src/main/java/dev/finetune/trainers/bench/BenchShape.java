package dev.finetune.trainers.bench;

import com.google.gson.JsonParser;
import dev.finetune.recipes.model.ModelConfig;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The training benchmark's shapes with their default timed and warm-up step counts, from {@code shapes.tsv} beside
 * this class, the table the peer runner ({@code trainers/src/main/python/bench/peers.py}) reads too, so both sides
 * of a comparison train the same model.
 */
public enum BenchShape {
    TINY, SMALL, MEDIUM;

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

    BenchShape() {
        Map<String, Integer> row = Table.ROWS.get(name().toLowerCase(Locale.ROOT));
        if (row == null) {
            throw new IllegalStateException(Table.FILE + " has no row for " + name().toLowerCase(Locale.ROOT));
        }
        vocab = row.get("vocab");
        dim = row.get("dim");
        layers = row.get("layers");
        heads = row.get("heads");
        kvHeads = row.get("kv_heads");
        ffn = row.get("ffn");
        seq = row.get("seq");
        batch = row.get("batch");
        steps = row.get("steps");
        warmupSteps = row.get("warmup_steps");
    }

    /** The table, read once; a holder because an enum's constructor cannot read the enum's own static fields. */
    private static final class Table {
        static final String FILE = "shapes.tsv";
        static final Map<String, Map<String, Integer>> ROWS = read();

        private static Map<String, Map<String, Integer>> read() {
            try (InputStream in = BenchShape.class.getResourceAsStream(FILE)) {
                if (in == null) {
                    throw new IllegalStateException(FILE + " is missing from the build");
                }
                List<String> lines = new String(in.readAllBytes(), StandardCharsets.UTF_8).lines()
                        .filter(l -> !l.isBlank() && !l.startsWith("#")).toList();
                String[] header = lines.get(0).split("\t");
                Map<String, Map<String, Integer>> rows = new HashMap<>();
                for (String line : lines.subList(1, lines.size())) {
                    String[] cells = line.split("\t");
                    if (cells.length != header.length) {
                        throw new IllegalStateException(FILE + ": row '" + line + "' has " + cells.length
                                + " cells, the header " + header.length);
                    }
                    Map<String, Integer> row = new HashMap<>();
                    for (int i = 1; i < cells.length; i++) {
                        row.put(header[i], Integer.parseInt(cells[i]));
                    }
                    rows.put(cells[0], row);
                }
                return rows;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
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
