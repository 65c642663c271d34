package dev.finetune.trainers.families;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import dev.finetune.adapters.io.SafetensorsReader;
import dev.finetune.trainers.backend.SavedModels;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * merge-lora on mixtures of experts equals PEFT's merge_and_unload: LoRA on the stacked experts (PEFT's
 * target_parameters), on the router and on attention, folded into checkpoints that keep each expert its own tensors
 * (Mixtral's w1/w3/w2, Qwen-MoE's gate/up/down projections).
 */
class ExpertMergeTest {

    @Test
    void expertRouterAndAttentionLoraMergeAsPeftMergesThem(@TempDir Path work) throws Exception {
        List<String> variants = List.of("mixtral", "qwen3_moe", "qwen2_moe");
        List<JsonObject> requests = new ArrayList<>();
        for (String variant : variants) {
            JsonObject adapter = new JsonObject();
            adapter.addProperty("kind", "adapter");
            adapter.addProperty("model", TinyFamilies.model(variant).toString());
            adapter.addProperty("out", work.resolve(variant + "-adapter").toString());
            adapter.addProperty("r", 2);
            JsonArray modules = new JsonArray();
            modules.add("q_proj");
            modules.add("o_proj");
            adapter.add("target_modules", modules);
            JsonArray parameters = new JsonArray();
            parameters.add("mlp.experts.gate_up_proj");
            parameters.add("mlp.experts.down_proj");
            // the router, a linear in Mixtral 4 and a parameter of its own module in transformers 5
            parameters.add("mlp.gate.weight");
            adapter.add("target_parameters", parameters);
            requests.add(adapter);
            JsonObject merged = new JsonObject();
            merged.addProperty("kind", "merged");
            merged.addProperty("model", TinyFamilies.model(variant).toString());
            merged.addProperty("adapter", work.resolve(variant + "-adapter").toString());
            merged.addProperty("out", work.resolve(variant + "-peft-merged").toString());
            requests.add(merged);
        }
        TinyFamilies.views(requests, work);
        for (String variant : variants) {
            Path ours = work.resolve(variant + "-merged");
            SavedModels.mergeLora(work.resolve(variant + "-adapter"), ours);
            double worst = 0;
            int compared = 0;
            try (NDManager manager = NDManager.newBaseManager();
                    SafetensorsReader theirs = SafetensorsReader.open(work.resolve(variant + "-peft-merged"));
                    SafetensorsReader mine = SafetensorsReader.open(ours);
                    SafetensorsReader base = SafetensorsReader.open(TinyFamilies.model(variant))) {
                assertEquals(new java.util.TreeSet<>(theirs.names()), new java.util.TreeSet<>(mine.names()), variant);
                int changed = 0;
                for (String name : theirs.names()) {
                    NDArray a = theirs.load(name, manager);
                    NDArray b = mine.load(name, manager);
                    worst = Math.max(worst, a.sub(b).abs().max().getFloat());
                    changed += base.load(name, manager).sub(b).abs().max().getFloat() > 1e-4 ? 1 : 0;
                    compared++;
                }
                System.out.printf("%s merge-lora vs merge_and_unload: %d tensors, %d changed by the adapter, max |d| %.2e%n",
                        variant, compared, changed, worst);
                assertTrue(changed > 0, variant + ": the adapter changed nothing");
            }
            assertTrue(worst < 1e-5, variant + ": max |merged - PEFT merged| " + worst);
        }
    }
}
