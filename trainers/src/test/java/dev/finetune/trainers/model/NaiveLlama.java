package dev.finetune.trainers.model;

import dev.finetune.recipes.model.ModelConfig;
import java.util.Map;

/**
 * A second, deliberately plain implementation of the same architecture: scalar loops in double precision, no
 * engine, written from the Hugging Face modelling code's definitions rather than from {@link LlamaModel}. Tests
 * compare the two on random weights for the variants no public reference file covers (biases, q/k norms, RoPE
 * scalings, untied heads).
 */
final class NaiveLlama {
    private final ModelConfig c;
    private final Map<String, float[]> w;

    NaiveLlama(ModelConfig config, Map<String, float[]> weights) {
        this.c = config;
        this.w = weights;
    }

    /** Logits {@code [T][V]} for one sequence at positions 0..T-1. */
    double[][] forward(long[] ids) {
        int t = ids.length;
        int hidden = c.hiddenSize();
        int heads = c.numAttentionHeads();
        int kv = c.numKeyValueHeads();
        int d = c.headDim();
        double[][] x = new double[t][hidden];
        float[] embedding = w.get("model.embed_tokens.weight");
        for (int i = 0; i < t; i++) {
            for (int j = 0; j < hidden; j++) {
                x[i][j] = embedding[(int) ids[i] * hidden + j];
            }
        }
        double[] inverse = inverseFrequencies();
        for (int layer = 0; layer < c.numHiddenLayers(); layer++) {
            String p = "model.layers." + layer + ".";
            double[][] h = norm(x, w.get(p + "input_layernorm.weight"));
            double[][] q = linear(h, p + "self_attn.q_proj", heads * d, hidden);
            double[][] k = linear(h, p + "self_attn.k_proj", kv * d, hidden);
            double[][] v = linear(h, p + "self_attn.v_proj", kv * d, hidden);
            for (int i = 0; i < t; i++) {
                if (c.qkNorm() == dev.finetune.recipes.model.Family.QkNorm.PER_HEAD) {
                    headNorm(q[i], heads, d, w.get(p + "self_attn.q_norm.weight"));
                    headNorm(k[i], kv, d, w.get(p + "self_attn.k_norm.weight"));
                }
                rotate(q[i], heads, d, i, inverse);
                rotate(k[i], kv, d, i, inverse);
            }
            double[][] attended = new double[t][heads * d];
            for (int head = 0; head < heads; head++) {
                int kvHead = head / (heads / kv);
                for (int i = 0; i < t; i++) {
                    double[] scores = new double[i + 1];
                    double max = Double.NEGATIVE_INFINITY;
                    for (int s = 0; s <= i; s++) {
                        double dot = 0;
                        for (int e = 0; e < d; e++) {
                            dot += q[i][head * d + e] * k[s][kvHead * d + e];
                        }
                        scores[s] = dot / Math.sqrt(d);
                        max = Math.max(max, scores[s]);
                    }
                    double sum = 0;
                    for (int s = 0; s <= i; s++) {
                        scores[s] = Math.exp(scores[s] - max);
                        sum += scores[s];
                    }
                    for (int s = 0; s <= i; s++) {
                        for (int e = 0; e < d; e++) {
                            attended[i][head * d + e] += scores[s] / sum * v[s][kvHead * d + e];
                        }
                    }
                }
            }
            add(x, linear(attended, p + "self_attn.o_proj", hidden, heads * d));
            double[][] h2 = norm(x, w.get(p + "post_attention_layernorm.weight"));
            double[][] gate = linear(h2, p + "mlp.gate_proj", c.intermediateSize(), hidden);
            double[][] up = linear(h2, p + "mlp.up_proj", c.intermediateSize(), hidden);
            for (int i = 0; i < t; i++) {
                for (int j = 0; j < c.intermediateSize(); j++) {
                    double g = gate[i][j];
                    gate[i][j] = g / (1 + Math.exp(-g)) * up[i][j];
                }
            }
            add(x, linear(gate, p + "mlp.down_proj", hidden, c.intermediateSize()));
        }
        double[][] out = norm(x, w.get("model.norm.weight"));
        String head = c.tieWordEmbeddings() ? "model.embed_tokens" : "lm_head";
        return linear(out, head, c.vocabSize(), hidden);
    }

    private double[][] linear(double[][] x, String name, int out, int in) {
        float[] weight = w.get(name + ".weight");
        float[] bias = w.get(name + ".bias");
        double[][] y = new double[x.length][out];
        for (int i = 0; i < x.length; i++) {
            for (int o = 0; o < out; o++) {
                double s = bias == null ? 0 : bias[o];
                for (int j = 0; j < in; j++) {
                    s += x[i][j] * weight[o * in + j];
                }
                y[i][o] = s;
            }
        }
        return y;
    }

    private double[][] norm(double[][] x, float[] weight) {
        double[][] y = new double[x.length][];
        for (int i = 0; i < x.length; i++) {
            y[i] = x[i].clone();
            rms(y[i], 0, y[i].length, weight);
        }
        return y;
    }

    private void headNorm(double[] row, int count, int d, float[] weight) {
        for (int head = 0; head < count; head++) {
            rms(row, head * d, d, weight);
        }
    }

    private void rms(double[] v, int from, int n, float[] weight) {
        double squares = 0;
        for (int j = 0; j < n; j++) {
            squares += v[from + j] * v[from + j];
        }
        double scale = 1 / Math.sqrt(squares / n + c.rmsNormEps());
        for (int j = 0; j < n; j++) {
            v[from + j] = v[from + j] * scale * weight[j];
        }
    }

    /** Hugging Face pairs element j with j + d/2 of each head ("rotate half"). */
    private static void rotate(double[] row, int count, int d, int position, double[] inverse) {
        int half = d / 2;
        for (int head = 0; head < count; head++) {
            for (int j = 0; j < half; j++) {
                double angle = position * inverse[j];
                double a = row[head * d + j];
                double b = row[head * d + j + half];
                row[head * d + j] = a * Math.cos(angle) - b * Math.sin(angle);
                row[head * d + j + half] = b * Math.cos(angle) + a * Math.sin(angle);
            }
        }
    }

    private double[] inverseFrequencies() {
        int d = c.headDim();
        double[] f = new double[d / 2];
        for (int j = 0; j < f.length; j++) {
            f[j] = 1.0 / Math.pow(c.ropeTheta(), 2.0 * j / d);
        }
        ModelConfig.RopeScaling s = c.ropeScaling();
        if (s == null) {
            return f;
        }
        for (int j = 0; j < f.length; j++) {
            if (s.type().equals("linear")) {
                f[j] /= s.factor();
            } else if (s.type().equals("llama3")) {
                double wavelength = 2 * Math.PI / f[j];
                double low = s.originalMaxPositionEmbeddings() / s.lowFreqFactor();
                double high = s.originalMaxPositionEmbeddings() / s.highFreqFactor();
                if (wavelength > low) {
                    f[j] /= s.factor();
                } else if (wavelength >= high) {
                    double smooth = (s.originalMaxPositionEmbeddings() / wavelength - s.lowFreqFactor()) / (s.highFreqFactor() - s.lowFreqFactor());
                    f[j] = (1 - smooth) * f[j] / s.factor() + smooth * f[j];
                }
            }
        }
        return f;
    }

    private static void add(double[][] x, double[][] y) {
        for (int i = 0; i < x.length; i++) {
            for (int j = 0; j < x[i].length; j++) {
                x[i][j] += y[i][j];
            }
        }
    }
}
