package dev.finetune.adapters.peft;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.lora.TinyNet;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.UserError;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class LoraMergeTest {

    @Test
    void mergedWeightsReproduceBasePlusAdapterOutputs() {
        for (boolean rslora : new boolean[] {false, true}) {
            try (NDManager manager = NDManager.newBaseManager()) {
                AdapterSpec.Lora spec = new AdapterSpec.Lora(4, 8, 0, List.of(), true, rslora, null);
                Map<String, NDArray> base = TinyNet.baseWeights(manager, 24, 16, 8, 3, DataType.FLOAT32);
                LoraFactory factory = new LoraFactory(spec, manager, 9);
                TinyNet adapted = new TinyNet(factory, base);
                adapted.randomizeB(17);
                NDArray x = TinyNet.random(manager, new Shape(5, 24), 4, 1, DataType.FLOAT32);
                float[] expected = adapted.forward(x).toFloatArray();

                Map<String, NDArray> adapter = new LinkedHashMap<>();
                for (NamedArray param : adapted.trainable()) {
                    adapter.put(param.name(), param.array());
                }
                AdapterConfig config = AdapterConfig.of(spec, factory.peftTargets(), "tiny");
                Map<String, NDArray> merged = LoraMerge.merge(base, config, adapter, "adapter");
                assertEquals(List.copyOf(base.keySet()), List.copyOf(merged.keySet()));
                assertSame(base.get(TinyNet.UP + ".bias"), merged.get(TinyNet.UP + ".bias"));
                float[] actual = new TinyNet(PlainProjection.frozenFactory(), merged).forward(x).toFloatArray();
                double worst = 0;
                for (int i = 0; i < expected.length; i++) {
                    worst = Math.max(worst, Math.abs(expected[i] - actual[i]));
                }
                assertTrue(worst <= 1e-4, "merged vs base+adapter: " + worst);
                float[] unmerged = new TinyNet(PlainProjection.frozenFactory(), base).forward(x).toFloatArray();
                double moved = 0;
                for (int i = 0; i < expected.length; i++) {
                    moved = Math.max(moved, Math.abs(expected[i] - unmerged[i]));
                }
                assertTrue(moved > 100 * 1e-4, "the adapter matters, so the comparison is not vacuous: " + moved);
            }
        }
    }

    @Test
    void refusesAnAdapterThatDoesNotFitTheBase() {
        try (NDManager manager = NDManager.newBaseManager()) {
            AdapterConfig config = new AdapterConfig(2, 4, 0, new AdapterConfig.Targets.Names(List.of("q_proj")),
                    false, "tiny");
            Map<String, NDArray> base = Map.of("model.layers.0.self_attn.q_proj.weight",
                    manager.zeros(new Shape(8, 6), DataType.FLOAT32));
            Map<String, NDArray> wrongShape = Map.of(
                    PeftNames.loraA("model.layers.0.self_attn.q_proj"), manager.zeros(new Shape(2, 7)),
                    PeftNames.loraB("model.layers.0.self_attn.q_proj"), manager.zeros(new Shape(8, 2)));
            assertTrue(assertThrows(UserError.class, () -> LoraMerge.merge(base, config, wrongShape, "a"))
                    .getMessage().contains("(2, 7)"));
            Map<String, NDArray> otherLayer = Map.of(
                    PeftNames.loraA("model.layers.3.self_attn.q_proj"), manager.zeros(new Shape(2, 6)),
                    PeftNames.loraB("model.layers.3.self_attn.q_proj"), manager.zeros(new Shape(8, 2)));
            assertTrue(assertThrows(UserError.class, () -> LoraMerge.merge(base, config, otherLayer, "a"))
                    .getMessage().contains("model.layers.3.self_attn.q_proj.weight"));
            Map<String, NDArray> halfPair = Map.of(
                    PeftNames.loraA("model.layers.0.self_attn.q_proj"), manager.zeros(new Shape(2, 6)));
            assertThrows(UserError.class, () -> LoraMerge.merge(base, config, halfPair, "a"));
        }
    }
}
