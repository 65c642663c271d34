package dev.finetune.adapters.peft;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.lora.TinyNet;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.UserError;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class AdapterWeightsTest {
    private static AdapterSpec.Lora spec(int r, List<String> targets) {
        return new AdapterSpec.Lora(r, 2 * r, 0, targets, false, false, null);
    }

    private static Map<String, NDArray> tensors(TinyNet net) {
        Map<String, NDArray> map = new LinkedHashMap<>();
        for (NamedArray param : net.trainable()) {
            map.put(param.name(), param.array());
        }
        return map;
    }

    @Test
    void loadedAdapterReproducesTheTrainedOne() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Map<String, NDArray> base = TinyNet.baseWeights(manager, 12, 8, 4, 1, DataType.FLOAT32);
            List<String> targets = List.of("up_proj", "down_proj");
            TinyNet trained = new TinyNet(new LoraFactory(spec(4, targets), manager, 1), base);
            trained.randomizeB(3);
            TinyNet fresh = new TinyNet(new LoraFactory(spec(4, targets), manager, 2), base);
            NDArray x = TinyNet.random(manager, new Shape(3, 12), 5, 1, DataType.FLOAT32);
            AdapterWeights.load(fresh.trainable(), tensors(trained), "out/adapter_model.safetensors");
            assertArrayEquals(trained.forward(x).toFloatArray(), fresh.forward(x).toFloatArray(), 0f);
        }
    }

    @Test
    void refusesAnAdapterForOtherModulesOrRank() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Map<String, NDArray> base = TinyNet.baseWeights(manager, 12, 8, 4, 1, DataType.FLOAT32);
            TinyNet upOnly = new TinyNet(new LoraFactory(spec(4, List.of("up_proj")), manager, 1), base);
            TinyNet both = new TinyNet(new LoraFactory(spec(4, List.of("up_proj", "down_proj")), manager, 1), base);
            TinyNet rank2 = new TinyNet(new LoraFactory(spec(2, List.of("up_proj", "down_proj")), manager, 1), base);
            UserError missing = assertThrows(UserError.class,
                    () -> AdapterWeights.load(both.trainable(), tensors(upOnly), "a"));
            assertTrue(missing.getMessage().contains("missing " + PeftNames.loraA(TinyNet.DOWN)), missing.getMessage());
            UserError extra = assertThrows(UserError.class,
                    () -> AdapterWeights.load(upOnly.trainable(), tensors(both), "a"));
            assertTrue(extra.getMessage().contains("unexpected"), extra.getMessage());
            UserError shape = assertThrows(UserError.class,
                    () -> AdapterWeights.load(rank2.trainable(), tensors(both), "a"));
            assertTrue(shape.hint().contains("lora_r"), shape.oneLine());
        }
    }
}
