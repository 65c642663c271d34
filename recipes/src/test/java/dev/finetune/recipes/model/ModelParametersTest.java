package dev.finetune.recipes.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.AdapterSpec;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class ModelParametersTest {

    /** Official safetensors totals and the embedding / per-layer split, from the models' published config.json and safetensors index. */
    @ParameterizedTest(name = "{0}")
    @CsvSource({
        "meta-llama/Llama-3.1-8B, 525336576, 218112000, 8030261248",
        "meta-llama/Llama-3.1-70B, 1050673152, 855654400, 70553706496",
        "meta-llama/Llama-3.2-1B, 262668288, 60821504, 1235814400",
        "meta-llama/Llama-3.2-3B, 394002432, 100669440, 3212749824",
        "Qwen/Qwen2.5-0.5B, 136134656, 14912384, 494032768",
        "Qwen/Qwen2.5-1.5B, 233373696, 46797824, 1543714304",
        "Qwen/Qwen2.5-7B, 544997376, 233057792, 7615616512",
        "Qwen/Qwen2.5-14B, 778567680, 275268608, 14770033664",
        "Qwen/Qwen2.5-32B, 778567680, 487605248, 32763876352",
        "Qwen/Qwen2.5-72B, 1245708288, 877684736, 72706203648",
        "Qwen/Qwen3-8B, 622329856, 192946432, 8190735360",
        "mistralai/Mistral-7B-v0.3, 134217728, 218112000, 7248023552",
        "mistralai/Mixtral-8x7B-v0.1, 131072000, 1451270144, 46702792704",
        "google/gemma-2-9b, 917504000, 198195200, 9241705984",
        "microsoft/Phi-3-mini-4k-instruct, 98500608, 113252352, 3821079552",
        "HuggingFaceTB/SmolLM2-135M, 28311552, 3540096, 134515008",
        "HuggingFaceTB/SmolLM2-360M, 47185920, 9832320, 361821120",
        "HuggingFaceTB/SmolLM2-1.7B, 100663296, 67112960, 1711376384",
        "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T, 65536000, 44044288, 1100048384",
    })
    void countsEveryParameterOfTheNineteenModels(String name, long embedding, long perLayer, long official) {
        ModelConfig config = KnownModels.lookup(name).orElseThrow();
        ModelParameters p = config.parameters();
        assertEquals(official, config.parameterCount(), name + " total");
        assertEquals(embedding, p.embedding().numel(), name + " embedding");
        assertEquals(perLayer, p.perLayer(), name + " per layer");
        assertEquals(p.total(), p.embedding().numel() + p.headParams() + p.layers() * p.perLayer() + config.hiddenSize(),
                "total = embedding + head + layers + final norm");
    }

    @Test
    void instructVariantsShareTheBaseArchitecture() {
        assertEquals(KnownModels.lookup("meta-llama/Llama-3.1-8B"), KnownModels.lookup("meta-llama/Llama-3.1-8B-Instruct"));
        assertEquals(KnownModels.lookup("meta-llama/Llama-3.1-70B"), KnownModels.lookup("meta-llama/Llama-3.3-70B-Instruct"));
        assertEquals(KnownModels.lookup("Qwen/Qwen2.5-7B"), KnownModels.lookup("qwen/qwen2.5-7b-instruct"));
        assertTrue(KnownModels.names().size() >= 19);
    }

    /** Parameter totals quoted (in billions) by the memory measurements' sources, for the older models they used. */
    @ParameterizedTest(name = "{0}")
    @CsvSource({
        "meta-llama/Llama-2-7b-hf, 6.738", "meta-llama/Llama-2-70b-hf, 68.977", "01-ai/Yi-34B, 34.389",
        "mistralai/Mistral-7B-Instruct-v0.2, 7.242", "meta-llama/Llama-3.1-405B, 405.85"})
    void olderModelsMatchTheirPublishedSizes(String name, String billions) {
        long count = KnownModels.lookup(name).orElseThrow().parameterCount();
        // Agree to the digits quoted: half a unit in the last place.
        int decimals = billions.length() - billions.indexOf('.') - 1;
        assertEquals(Double.parseDouble(billions), count / 1e9, 0.5 * Math.pow(10, -decimals), name);
    }

    /** LoRA trainable counts printed by PEFT / derived from r·(d_in + d_out) per adapted linear (docs/memory-plan.md). */
    @Test
    void loraTrainableParametersMatchPeft() {
        assertEquals(9_175_040, lora("meta-llama/Llama-3.2-3B", 32, List.of("q_proj", "v_proj"), false));
        assertEquals(18_350_080, lora("meta-llama/Llama-3.2-3B", 64, List.of("q_proj", "v_proj"), false));
        assertEquals(9_461_760, lora("meta-llama/Llama-3.2-3B", 10, List.of("gate_proj", "up_proj", "down_proj"), false));
        assertEquals(4_194_304, lora("meta-llama/Llama-2-7b-hf", 8, List.of("q_proj", "v_proj"), false));
        assertEquals(6_553_600, lora("meta-llama/Llama-2-13b-hf", 8, List.of("q_proj", "v_proj"), false));
        assertEquals(41_943_040, lora("meta-llama/Llama-3.1-8B", 16, List.of(), true));
        // A regex over the full module name selects the same layers as the short names.
        assertEquals(9_175_040, lora("meta-llama/Llama-3.2-3B", 32, List.of(".*\\.(q|v)_proj"), false));
        // Phi-3's fused projections: q_proj does not exist there.
        assertEquals(0, lora("microsoft/Phi-3-mini-4k-instruct", 8, List.of("q_proj"), false));
    }

    private static long lora(String model, int r, List<String> targets, boolean allLinear) {
        AdapterSpec adapter = new AdapterSpec.Lora(r, 2.0 * r, 0.0, targets, allLinear, false, null);
        return KnownModels.lookup(model).orElseThrow().parameters().loraTrainable(adapter);
    }

    @Test
    void localDirectoryWinsAndUnknownNamesSayHowToGiveTheConfig(@TempDir Path dir) throws IOException {
        Path model = Files.createDirectories(dir.resolve("my-model"));
        Files.writeString(model.resolve("config.json"), """
                {"model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "tie_word_embeddings": true}""");
        ModelSource local = ModelSource.resolve("my-model", null, dir, null);
        ModelConfig config = assertInstanceOf(ModelSource.Found.class, local).config();
        // 2 layers × (q 64·64 + k,v 2·64·32 + o 64·64 + MLP 3·64·172 + 2 norms) + tied embedding 100·64 + final norm
        assertEquals(2L * (4096 + 4096 + 4096 + 33024 + 128) + 6400 + 64, config.parameterCount());

        ModelSource.Unknown unknown = assertInstanceOf(ModelSource.Unknown.class, ModelSource.resolve("someone/new-model", null, dir, null));
        assertTrue(unknown.asError().oneLine().contains("--model-config"), unknown.asError().oneLine());

        ModelSource explicit = ModelSource.resolve("someone/new-model", null, dir, model.resolve("config.json"));
        assertEquals(config, assertInstanceOf(ModelSource.Found.class, explicit).config());
    }
}
