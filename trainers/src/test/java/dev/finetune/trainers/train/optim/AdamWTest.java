package dev.finetune.trainers.train.optim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.NamedArray;
import java.util.List;
import org.junit.jupiter.api.Test;

class AdamWTest {

    /** Sets the gradients to exactly {@code coefficients} through the engine: d/dw Σ cᵢwᵢ = c. */
    private static void setGradients(NDManager manager, List<NamedArray> params, float[][] coefficients) {
        try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
            NDArray loss = null;
            for (int i = 0; i < params.size(); i++) {
                NDArray term = params.get(i).array().mul(manager.create(coefficients[i])).sum();
                loss = loss == null ? term : loss.add(term);
            }
            collector.backward(loss);
        }
    }

    @Test
    void globalNormAndClipScaleMatchAHandComputation() {
        try (NDManager manager = NDManager.newBaseManager()) {
            List<NamedArray> params = List.of(
                    new NamedArray("w.weight", grad(manager.create(new float[] {1f, 1f}))),
                    new NamedArray("w.bias", grad(manager.create(new float[] {1f}))));
            setGradients(manager, params, new float[][] {{3f, 4f}, {12f}});
            double norm = GradientClipping.globalNorm(params);
            assertEquals(13.0, norm, 1e-6); // sqrt(9 + 16 + 144)
            assertEquals(1.0 / (13.0 + 1e-6), GradientClipping.scale(norm, 1.0), 1e-12);
            assertEquals(1.0, GradientClipping.scale(norm, 20.0));
            assertEquals(1.0, GradientClipping.scale(norm, 0.0));
        }
    }

    @Test
    void clippedUpdatesMatchTorchAdamWFormulaWithNoDecayOnBiasesAndNorms() {
        double lr = 0.1;
        double b1 = 0.9;
        double b2 = 0.99;
        double eps = 1e-3; // large, so a mis-corrected epsilon would show
        double wd = 0.5;
        double maxNorm = 1.0;
        float[][] grads = {{3f, -4f}, {12f}};
        double[][] w = {{1.0, -2.0}, {0.5}};
        double[][] m = {{0, 0}, {0}};
        double[][] v = {{0, 0}, {0}};
        try (NDManager manager = NDManager.newBaseManager()) {
            List<NamedArray> params = List.of(
                    new NamedArray("layer.weight", grad(manager.create(new float[] {1f, -2f}))),
                    new NamedArray("layer.input_layernorm.weight", grad(manager.create(new float[] {0.5f}))));
            AdamW adamw = new AdamW(params, new AdamW.Hyper(b1, b2, eps, wd), manager);
            JniUtils.setGradMode(false);
            for (int t = 1; t <= 3; t++) {
                float[][] g = {{grads[0][0] * t, grads[0][1]}, {grads[1][0] / t}};
                setGradients(manager, params, g);
                double norm = Math.sqrt(g[0][0] * g[0][0] + g[0][1] * g[0][1] + g[1][0] * g[1][0]);
                double clip = Math.min(1.0, maxNorm / (norm + 1e-6));
                adamw.step(t, lr, GradientClipping.scale(GradientClipping.globalNorm(params), maxNorm));
                // torch.optim.AdamW, written out: decay (weights only), moments, bias-corrected step
                for (int p = 0; p < 2; p++) {
                    double decay = p == 0 ? wd : 0.0;
                    for (int i = 0; i < w[p].length; i++) {
                        double gi = g[p][i] * clip;
                        w[p][i] *= 1 - lr * decay;
                        m[p][i] = b1 * m[p][i] + (1 - b1) * gi;
                        v[p][i] = b2 * v[p][i] + (1 - b2) * gi * gi;
                        double mHat = m[p][i] / (1 - Math.pow(b1, t));
                        double vHat = v[p][i] / (1 - Math.pow(b2, t));
                        w[p][i] -= lr * mHat / (Math.sqrt(vHat) + eps);
                    }
                }
            }
            float[] weight = params.get(0).array().toFloatArray();
            float[] norm = params.get(1).array().toFloatArray();
            assertEquals(w[0][0], weight[0], 1e-6);
            assertEquals(w[0][1], weight[1], 1e-6);
            assertEquals(w[1][0], norm[0], 1e-6);
        }
    }

    @Test
    void biasesAndNormsAreExemptFromDecay() {
        assertTrue(AdamW.isDecayed("model.layers.0.mlp.up_proj.weight"));
        assertTrue(AdamW.isDecayed("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
        assertFalse(AdamW.isDecayed("model.layers.0.mlp.up_proj.bias"));
        assertFalse(AdamW.isDecayed("model.layers.0.post_attention_layernorm.weight"));
        assertFalse(AdamW.isDecayed("model.norm.weight"));
    }

    private static NDArray grad(NDArray fromJava) {
        NDArray owned = fromJava.duplicate();
        owned.setRequiresGradient(true);
        return owned;
    }
}
