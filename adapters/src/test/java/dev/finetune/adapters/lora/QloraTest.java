package dev.finetune.adapters.lora;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.HostArrays;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.nf4.Nf4Projection;
import dev.finetune.adapters.nf4.Nf4Quantized;
import dev.finetune.recipes.AdapterSpec;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

@SuppressWarnings("try") // scopes are held only for their extent
class QloraTest {
    private static final AdapterSpec.Nf4 NF4 = new AdapterSpec.Nf4(64, true);

    private static AdapterSpec.Lora spec(AdapterSpec.Nf4 quantization) {
        return new AdapterSpec.Lora(8, 16, 0, List.of(), true, false, quantization);
    }

    @Test
    void qloraTrainsLikeLoraOnTheDequantizedWeights() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Map<String, NDArray> weights = TinyNet.baseWeights(manager, 64, 128, 64, 4, DataType.FLOAT32);
            Map<String, NDArray> dequantized = new LinkedHashMap<>();
            weights.forEach((name, array) -> dequantized.put(name, name.endsWith(".weight")
                    ? HostArrays.floats(manager,
                            Nf4Quantized.quantize(array.toFloatArray(), array.getShape(), NF4).dequantize(),
                            array.getShape(), DataType.FLOAT32)
                    : array.duplicate()));

            TinyNet qlora = new TinyNet(new LoraFactory(spec(NF4), manager, 3), TinyNet.copy(weights));
            TinyNet reference = new TinyNet(new LoraFactory(spec(null), manager, 3), dequantized);
            assertInstanceOf(Nf4Projection.class, ((LoraProjection) qlora.up).base());
            assertInstanceOf(PlainProjection.class, ((LoraProjection) reference.up).base());

            NDArray x = TinyNet.random(manager, new Shape(32, 64), 10, 1, DataType.FLOAT32);
            NDArray y = TinyNet.random(manager, new Shape(32, 64), 11, 0.5, DataType.FLOAT32);
            double[] qloraLosses = train(qlora, x, y, 6);
            double[] referenceLosses = train(reference, x, y, 6);
            double worst = 0;
            for (int step = 0; step < qloraLosses.length; step++) {
                double relative = Math.abs(qloraLosses[step] - referenceLosses[step]) / referenceLosses[step];
                assertTrue(relative < 0.02, "step " + step + ": QLoRA " + qloraLosses[step] + " vs LoRA on "
                        + "dequantized weights " + referenceLosses[step]);
                worst = Math.max(worst, relative);
            }
            System.out.printf("QLoRA vs LoRA on dequantized weights: losses %.6f -> %.6f vs %.6f -> %.6f,"
                    + " largest relative difference %.2e%n", qloraLosses[0], qloraLosses[5], referenceLosses[0],
                    referenceLosses[5], worst);
            assertTrue(qloraLosses[5] < qloraLosses[0] * 0.9, "the adapter learns: " + qloraLosses[0] + " -> "
                    + qloraLosses[5]);
        }
    }

    /** Plain SGD, {@code steps} updates; returns the loss before each update. */
    private static double[] train(TinyNet net, NDArray x, NDArray y, int steps) {
        double[] losses = new double[steps];
        List<NamedArray> params = net.trainable();
        assertEquals(4, params.size(), "only the two A and two B matrices train");
        for (int step = 0; step < steps; step++) {
            try (NDScope ignored = new NDScope()) {
                try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                    NDArray loss = net.forward(x).sub(y).square().mean();
                    collector.backward(loss);
                    losses[step] = loss.getFloat();
                }
                for (NamedArray param : params) {
                    NDArray gradient = param.array().getGradient();
                    param.array().subi(gradient.mul(0.5f));
                    JniUtils.zeroGrad((PtNDArray) param.array());
                }
            }
        }
        return losses;
    }

    @Test
    void outputHeadIsNeverQuantizedNorAdaptedByAllLinear() {
        try (NDManager manager = NDManager.newBaseManager()) {
            LoraFactory factory = new LoraFactory(spec(NF4), manager, 1);
            NDArray head = TinyNet.random(manager, new Shape(64, 64), 1, 1, DataType.FLOAT32);
            NDArray query = TinyNet.random(manager, new Shape(64, 64), 2, 1, DataType.FLOAT32);
            NDArray ungated = TinyNet.random(manager, new Shape(64, 64), 3, 1, DataType.FLOAT32);
            Projection headProjection = factory.create("lm_head", head, null);
            Projection queryProjection = factory.create("model.layers.0.self_attn.q_proj", query, null);
            assertInstanceOf(PlainProjection.class, headProjection);
            assertFalse(head.isReleased(), "the head keeps its float weight (it may be tied to the embeddings)");
            assertTrue(headProjection.trainable().isEmpty());
            assertInstanceOf(Nf4Projection.class, ((LoraProjection) queryProjection).base());
            assertTrue(query.isReleased(), "the float copy of a quantized weight is freed");

            LoraFactory named = new LoraFactory(new AdapterSpec.Lora(8, 16, 0, List.of("lm_head"), false, false, NF4),
                    manager, 1);
            Projection adaptedHead = named.create("lm_head", ungated, null);
            assertInstanceOf(PlainProjection.class, ((LoraProjection) adaptedHead).base(),
                    "naming lm_head adapts it, but its base stays unquantized");
        }
    }

    @Test
    void nf4BaseForwardUsesTheDequantizedWeightAndBias() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Shape shape = new Shape(96, 80);
            NDArray weight = TinyNet.random(manager, shape, 5, 0.1, DataType.FLOAT32);
            NDArray bias = TinyNet.random(manager, new Shape(96), 6, 0.1, DataType.FLOAT32);
            float[] restored = Nf4Quantized.quantize(weight.toFloatArray(), shape, NF4).dequantize();
            NDArray dense = HostArrays.floats(manager, restored, shape, DataType.FLOAT32);
            Projection nf4 = Nf4Projection.quantize("x", weight, bias, NF4, manager);
            NDArray x = TinyNet.random(manager, new Shape(3, 80), 7, 1, DataType.FLOAT32);
            float[] expected = new PlainProjection("x", dense, bias, false).forward(x).toFloatArray();
            float[] actual = nf4.forward(x).toFloatArray();
            for (int i = 0; i < expected.length; i++) {
                assertEquals(expected[i], actual[i], 1e-5f);
            }
        }
    }

    @Test
    void layersBuiltInsideAStepScopeOutliveIt() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Map<String, NDArray> weights = TinyNet.baseWeights(manager, 64, 64, 64, 4, DataType.FLOAT32);
            TinyNet net;
            try (NDScope buildScope = new NDScope()) {
                net = new TinyNet(new LoraFactory(spec(NF4), manager, 3), weights);
            }
            net.randomizeB(1);
            NDArray x = TinyNet.random(manager, new Shape(2, 64), 10, 1, DataType.FLOAT32);
            assertEquals(2 * 64, net.forward(x).toFloatArray().length);
        }
    }
}
