package dev.finetune.adapters.lora;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.recipes.AdapterSpec;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

@SuppressWarnings("try") // scopes and switch handles are held only for their extent
class LoraProjectionTest {

    private static AdapterSpec.Lora lora(int r, double alpha, double dropout) {
        return new AdapterSpec.Lora(r, alpha, dropout, List.of("up_proj", "down_proj"), false, false, null);
    }

    private static double loss(TinyNet net, NDArray x, NDArray probe) {
        try (NDScope ignored = new NDScope()) {
            return net.forward(x).mul(probe).sum().toDoubleArray()[0];
        }
    }

    @Test
    void gradientsMatchCentralFiniteDifferencesInFloat64() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Map<String, NDArray> weights = TinyNet.baseWeights(manager, 5, 4, 3, 1, DataType.FLOAT64);
            LoraFactory factory = new LoraFactory(lora(2, 3, 0), manager, 42);
            TinyNet net = new TinyNet(factory, weights);
            net.randomizeB(100);
            NDArray x = TinyNet.random(manager, new Shape(3, 5), 7, 1, DataType.FLOAT64);
            NDArray probe = TinyNet.random(manager, new Shape(3, 3), 8, 1, DataType.FLOAT64);

            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                NDArray loss = net.forward(x).mul(probe).sum();
                assertEquals(DataType.FLOAT64, loss.getDataType(), "float32 scaling must not demote float64");
                System.gc(); // a freed scalar operand would show up now as garbage gradients
                collector.backward(loss);
            }
            double eps = 1e-6;
            int checked = 0;
            for (NamedArray param : net.trainable()) {
                double[] analytic = param.array().getGradient().toDoubleArray();
                double[] values = param.array().toDoubleArray();
                for (int i = 0; i < values.length; i++) {
                    double original = values[i];
                    values[i] = original + eps;
                    param.array().set(values);
                    double plus = loss(net, x, probe);
                    values[i] = original - eps;
                    param.array().set(values);
                    double minus = loss(net, x, probe);
                    values[i] = original;
                    param.array().set(values);
                    double numeric = (plus - minus) / (2 * eps);
                    assertEquals(numeric, analytic[i], 1e-7 + 1e-6 * Math.abs(numeric), param.name() + "[" + i + "]");
                    checked++;
                }
            }
            assertEquals((2 * 5 + 4 * 2) + (2 * 4 + 3 * 2), checked, "every element of A and B of both layers");
            for (String frozen : List.of(TinyNet.UP + ".weight", TinyNet.UP + ".bias", TinyNet.DOWN + ".weight")) {
                assertFalse(weights.get(frozen).hasGradient(), frozen + " is frozen");
            }
        }
    }

    @Test
    void startsAtTheBaseModelWithPeftInitialisation() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Map<String, NDArray> weights = TinyNet.baseWeights(manager, 16, 8, 4, 2, DataType.FLOAT32);
            TinyNet base = new TinyNet(PlainProjection.frozenFactory(), weights);
            TinyNet adapted = new TinyNet(new LoraFactory(lora(4, 8, 0), manager, 5), weights);
            TinyNet again = new TinyNet(new LoraFactory(lora(4, 8, 0), manager, 5), weights);
            NDArray x = TinyNet.random(manager, new Shape(2, 16), 3, 1, DataType.FLOAT32);
            assertArrayEquals(base.forward(x).toFloatArray(), adapted.forward(x).toFloatArray(), 0f, "B = 0");

            LoraProjection up = (LoraProjection) adapted.up;
            float[] a = up.loraA().toFloatArray();
            float bound = (float) (1 / Math.sqrt(16));
            float largest = 0;
            for (float v : a) {
                assertTrue(Math.abs(v) <= bound, "Kaiming-uniform(a=sqrt 5) bound 1/sqrt(in)");
                largest = Math.max(largest, Math.abs(v));
            }
            assertTrue(largest > 0.8f * bound, "values spread over the range, not clustered at zero");
            assertEquals(new Shape(4, 16), up.loraA().getShape());
            assertEquals(new Shape(8, 4), up.loraB().getShape());
            assertArrayEquals(new float[8 * 4], up.loraB().toFloatArray(), 0f);
            assertArrayEquals(a, ((LoraProjection) again.up).loraA().toFloatArray(), 0f, "same seed, same A");
            LoraProjection down = (LoraProjection) adapted.down;
            assertFalse(java.util.Arrays.equals(
                    java.util.Arrays.copyOf(a, 8), java.util.Arrays.copyOf(down.loraA().toFloatArray(), 8)),
                    "each layer draws its own A");
            assertEquals(2.0, up.scaling(), 0);
        }
    }

    @Test
    void disabledAdapterGivesExactlyTheBaseOutput() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Map<String, NDArray> weights = TinyNet.baseWeights(manager, 16, 8, 4, 2, DataType.FLOAT32);
            TinyNet base = new TinyNet(PlainProjection.frozenFactory(), weights);
            LoraFactory factory = new LoraFactory(lora(4, 8, 0.1), manager, 5);
            TinyNet adapted = new TinyNet(factory, weights);
            adapted.randomizeB(9);
            NDArray x = TinyNet.random(manager, new Shape(2, 16), 3, 1, DataType.FLOAT32);
            float[] expected = base.forward(x).toFloatArray();
            factory.adapters().setTraining(true);
            try (AdapterSwitch.Restore off = factory.adapters().disabled()) {
                assertArrayEquals(expected, adapted.forward(x).toFloatArray(), 0f);
            }
            assertTrue(factory.adapters().enabled(), "closing the handle restores the adapter");
            float[] withAdapter;
            try (AdapterSwitch.Restore eval = factory.adapters().evaluating()) {
                withAdapter = adapted.forward(x).toFloatArray();
            }
            assertTrue(maxDiff(expected, withAdapter) > 1e-3, "the adapter changes the output");
        }
    }

    @Test
    void dropoutRunsOnlyInTraining() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Map<String, NDArray> weights = TinyNet.baseWeights(manager, 32, 16, 8, 2, DataType.FLOAT32);
            LoraFactory factory = new LoraFactory(lora(4, 8, 0.5), manager, 5);
            TinyNet adapted = new TinyNet(factory, weights);
            adapted.randomizeB(9);
            NDArray x = TinyNet.random(manager, new Shape(4, 32), 3, 1, DataType.FLOAT32);
            float[] eval1 = adapted.forward(x).toFloatArray();
            float[] eval2 = adapted.forward(x).toFloatArray();
            assertArrayEquals(eval1, eval2, 0f, "evaluation is deterministic");
            factory.adapters().setTraining(true);
            float[] train = adapted.forward(x).toFloatArray();
            assertTrue(maxDiff(eval1, train) > 1e-3, "dropout on the adapter input changes the output");
        }
    }

    private static double maxDiff(float[] a, float[] b) {
        double worst = 0;
        for (int i = 0; i < a.length; i++) {
            worst = Math.max(worst, Math.abs(a[i] - b[i]));
        }
        return worst;
    }
}
