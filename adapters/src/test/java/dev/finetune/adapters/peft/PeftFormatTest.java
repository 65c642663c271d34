package dev.finetune.adapters.peft;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.recipes.AdapterSpec;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Checks our adapter files against the layout PEFT documents and writes: tensors
 * {@code base_model.model.<layer>.lora_A.weight [r, in]} and {@code .lora_B.weight [out, r]} (no adapter name),
 * and adapter_config.json with {@code peft_type LORA}, {@code task_type CAUSAL_LM}, {@code bias none}.
 * The safetensors header is parsed here by hand, not with our reader, so the bytes on disk are what is checked.
 */
class PeftFormatTest {
    private static final int HIDDEN = 16;
    private static final int KV = 8;
    private static final int FFN = 24;

    @Test
    void filesHavePeftNamesShapesAndConfig(@TempDir Path out) throws IOException {
        try (NDManager manager = NDManager.newBaseManager()) {
            AdapterSpec.Lora spec = new AdapterSpec.Lora(4, 8, 0.05, List.of("q_proj", "v_proj", "down_proj"), false,
                    false, null);
            LoraFactory factory = new LoraFactory(spec, manager, 1);
            Map<String, long[]> shapes = Map.of("self_attn.q_proj", new long[] {HIDDEN, HIDDEN},
                    "self_attn.k_proj", new long[] {KV, HIDDEN}, "self_attn.v_proj", new long[] {KV, HIDDEN},
                    "mlp.down_proj", new long[] {HIDDEN, FFN}, "mlp.up_proj", new long[] {FFN, HIDDEN});
            List<NamedArray> trainable = new ArrayList<>();
            for (int layer = 0; layer < 2; layer++) {
                for (Map.Entry<String, long[]> e : shapes.entrySet()) {
                    NDArray weight = manager.randomNormal(new Shape(e.getValue()));
                    Projection p = factory.create("model.layers." + layer + "." + e.getKey(), weight, null);
                    trainable.addAll(p.trainable());
                }
            }
            factory.requireMatches();
            AdapterFiles.write(out, AdapterConfig.of(spec, factory.peftTargets(), "models/stories260K"), trainable);

            JsonObject header = safetensorsHeader(out.resolve("adapter_model.safetensors"));
            Set<String> expected = new TreeSet<>();
            for (int layer = 0; layer < 2; layer++) {
                for (String module : List.of("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj")) {
                    String prefix = "base_model.model.model.layers." + layer + "." + module;
                    expected.add(prefix + ".lora_A.weight");
                    expected.add(prefix + ".lora_B.weight");
                    long[] w = shapes.get(module);
                    assertShape(header, prefix + ".lora_A.weight", 4, w[1]);
                    assertShape(header, prefix + ".lora_B.weight", w[0], 4);
                }
            }
            Set<String> actual = new TreeSet<>(header.keySet());
            actual.remove("__metadata__");
            assertEquals(expected, actual);
            assertEquals("pt", header.getAsJsonObject("__metadata__").get("format").getAsString());

            JsonObject config = JsonParser.parseString(
                    Files.readString(out.resolve("adapter_config.json"))).getAsJsonObject();
            assertEquals("LORA", config.get("peft_type").getAsString());
            assertEquals("CAUSAL_LM", config.get("task_type").getAsString());
            assertEquals("none", config.get("bias").getAsString());
            assertEquals(4, config.get("r").getAsInt());
            assertEquals(8, config.get("lora_alpha").getAsInt());
            assertEquals(0.05, config.get("lora_dropout").getAsDouble());
            assertEquals(false, config.get("use_rslora").getAsBoolean());
            assertEquals(false, config.get("fan_in_fan_out").getAsBoolean());
            assertEquals("models/stories260K", config.get("base_model_name_or_path").getAsString());
            assertEquals(Set.of("q_proj", "v_proj", "down_proj"), strings(config.getAsJsonArray("target_modules")));

            AdapterFiles.Saved saved = AdapterFiles.read(out, manager);
            assertEquals(AdapterConfig.read(out), saved.config());
            for (NamedArray param : trainable) {
                assertArrayEquals(param.array().toFloatArray(), saved.tensors().get(param.name()).toFloatArray(), 0f);
            }
        }
    }

    private static void assertShape(JsonObject header, String name, long... dims) {
        JsonObject info = header.getAsJsonObject(name);
        assertTrue(info != null, "missing " + name);
        assertEquals("F32", info.get("dtype").getAsString());
        JsonArray shape = info.getAsJsonArray("shape");
        assertEquals(dims.length, shape.size(), name);
        for (int i = 0; i < dims.length; i++) {
            assertEquals(dims[i], shape.get(i).getAsLong(), name + " dim " + i);
        }
    }

    /** The safetensors layout: an 8-byte little-endian header length, then that many bytes of JSON. */
    private static JsonObject safetensorsHeader(Path file) throws IOException {
        byte[] bytes = Files.readAllBytes(file);
        long length = ByteBuffer.wrap(bytes, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        assertEquals(0, length % 8, "header padded to 8 bytes as Hugging Face writes it");
        JsonObject header = JsonParser.parseString(new String(bytes, 8, (int) length, StandardCharsets.UTF_8))
                .getAsJsonObject();
        long end = 0;
        for (String name : header.keySet()) {
            if (!name.equals("__metadata__")) {
                end = Math.max(end, header.getAsJsonObject(name).getAsJsonArray("data_offsets").get(1).getAsLong());
            }
        }
        assertEquals(bytes.length, 8 + length + end, "the data section ends where the file ends");
        return header;
    }

    private static Set<String> strings(JsonArray array) {
        Set<String> values = new TreeSet<>();
        array.forEach(e -> values.add(e.getAsString()));
        return values;
    }
}
