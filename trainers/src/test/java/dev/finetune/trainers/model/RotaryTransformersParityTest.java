package dev.finetune.trainers.model;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDManager;
import com.google.gson.JsonObject;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.trainers.parity.PythonStack;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The rotary inverse frequencies are transformers' to the bit for the head widths and bases of real models: every
 * rotary angle, and so every logit, inherits a last-bit difference in them.
 */
class RotaryTransformersParityTest {
    private static final List<String> CASES = List.of("10000:8", "10000:64", "10000:128", "500000:128", "1000000:128",
            "1000000:64");

    @Test
    void inverseFrequenciesAreTransformersBitForBit(@TempDir Path work) throws Exception {
        String[] printed = PythonStack.runScript(PythonStack.script("/parity/rope_inv_freq.py", work), work,
                CASES.toArray(new String[0])).trim().split("\n");
        assertEquals(CASES.size(), printed.length, String.join("\n", printed));
        try (NDManager manager = NDManager.newBaseManager()) {
            for (int c = 0; c < CASES.size(); c++) {
                String[] pair = CASES.get(c).split(":");
                JsonObject json = new JsonObject();
                json.addProperty("model_type", "llama");
                json.addProperty("hidden_size", 2 * Integer.parseInt(pair[1]));
                json.addProperty("intermediate_size", 8);
                json.addProperty("num_hidden_layers", 1);
                json.addProperty("num_attention_heads", 2);
                json.addProperty("num_key_value_heads", 2);
                json.addProperty("head_dim", Integer.parseInt(pair[1]));
                json.addProperty("vocab_size", 8);
                json.addProperty("rope_theta", Double.parseDouble(pair[0]));
                float[] ours = RotaryEmbedding.inverseFrequencies(ModelConfig.fromJson(json, "config"), manager);
                int[] bits = new int[ours.length];
                for (int i = 0; i < ours.length; i++) {
                    bits[i] = Float.floatToRawIntBits(ours[i]);
                }
                int[] theirs = Arrays.stream(printed[c].trim().split(" ")).mapToInt(Integer::parseInt).toArray();
                assertEquals(Arrays.toString(theirs), Arrays.toString(bits), "theta:head_dim " + CASES.get(c));
            }
        }
    }
}
