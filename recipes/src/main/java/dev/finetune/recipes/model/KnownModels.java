package dev.finetune.recipes.model;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;

/**
 * Architectures of well-known hub models, so {@code plan} can answer for {@code base_model:
 * meta-llama/Llama-3.1-8B} without downloading anything.
 *
 * <p>The numbers are those of each model's Hugging Face {@code config.json} (research/model-configs.tsv lists the
 * 19 main ones with their official parameter totals). They serve planning; the trainer always reads the
 * checkpoint's own config. Instruction-tuned variants with the same architecture are listed as aliases; where an
 * alias differs only in special-token ids, the base model's ids are kept because planning does not use them.
 */
public final class KnownModels {

    private record Entry(String name, List<String> aliases, ModelConfig config) {}

    private static final Map<String, ModelConfig> BY_NAME;
    private static final List<String> CANONICAL;

    static {
        List<Entry> entries = new ArrayList<>();
        ModelConfig.RopeScaling llama31 = new ModelConfig.RopeScaling("llama3", 8.0, 1.0, 4.0, 8192);
        ModelConfig.RopeScaling llama32 = new ModelConfig.RopeScaling("llama3", 32.0, 1.0, 4.0, 8192);

        entries.add(new Entry("meta-llama/Llama-3.1-8B",
                List.of("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B-Instruct"),
                dense("llama", 4096, 14336, 32, 32, 8, 128, 128256, false, 131072, 1e-5, 500000.0, llama31, 128000, 128001)));
        entries.add(new Entry("meta-llama/Llama-3.1-70B",
                List.of("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B-Instruct",
                        "meta-llama/Llama-3.3-70B-Instruct"),
                dense("llama", 8192, 28672, 80, 64, 8, 128, 128256, false, 131072, 1e-5, 500000.0, llama31, 128000, 128001)));
        entries.add(new Entry("meta-llama/Llama-3.2-1B", List.of("meta-llama/Llama-3.2-1B-Instruct"),
                dense("llama", 2048, 8192, 16, 32, 8, 64, 128256, true, 131072, 1e-5, 500000.0, llama32, 128000, 128001)));
        entries.add(new Entry("meta-llama/Llama-3.2-3B", List.of("meta-llama/Llama-3.2-3B-Instruct"),
                dense("llama", 3072, 8192, 28, 24, 8, 128, 128256, true, 131072, 1e-5, 500000.0, llama32, 128000, 128001)));
        entries.add(qwen25("Qwen/Qwen2.5-0.5B", 896, 4864, 24, 14, 2, 64, 151936, true, 32768));
        entries.add(qwen25("Qwen/Qwen2.5-1.5B", 1536, 8960, 28, 12, 2, 128, 151936, true, 131072));
        entries.add(qwen25("Qwen/Qwen2.5-7B", 3584, 18944, 28, 28, 4, 128, 152064, false, 131072));
        entries.add(qwen25("Qwen/Qwen2.5-14B", 5120, 13824, 48, 40, 8, 128, 152064, false, 131072));
        entries.add(qwen25("Qwen/Qwen2.5-32B", 5120, 27648, 64, 40, 8, 128, 152064, false, 131072));
        entries.add(qwen25("Qwen/Qwen2.5-72B", 8192, 29568, 80, 64, 8, 128, 152064, false, 131072));
        entries.add(new Entry("Qwen/Qwen3-8B", List.of("Qwen/Qwen3-8B-Base"),
                new ModelConfig("qwen3", 4096, 12288, 36, 32, 8, 128, 151936, 40960, 1e-6, 1000000.0, null,
                        false, false, true, 2, false, 0, 0, "bfloat16", 151643, 151645)));
        entries.add(new Entry("mistralai/Mistral-7B-v0.3", List.of("mistralai/Mistral-7B-Instruct-v0.3"),
                dense("mistral", 4096, 14336, 32, 32, 8, 128, 32768, false, 32768, 1e-5, 1000000.0, null, 1, 2)));
        entries.add(new Entry("mistralai/Mixtral-8x7B-v0.1", List.of("mistralai/Mixtral-8x7B-Instruct-v0.1"),
                new ModelConfig("mixtral", 4096, 14336, 32, 32, 8, 128, 32000, 32768, 1e-5, 1000000.0, null,
                        false, false, false, 2, false, 8, 2, "bfloat16", 1, 2)));
        entries.add(new Entry("google/gemma-2-9b", List.of("google/gemma-2-9b-it"),
                new ModelConfig("gemma2", 3584, 14336, 42, 16, 8, 256, 256000, 8192, 1e-6, 10000.0, null,
                        false, false, false, 4, true, 0, 0, "float32", 2, 1)));
        entries.add(new Entry("microsoft/Phi-3-mini-4k-instruct", List.of(),
                dense("phi3", 3072, 8192, 32, 32, 32, 96, 32064, false, 4096, 1e-5, 10000.0, null, 1, 32000)));
        entries.add(new Entry("HuggingFaceTB/SmolLM2-135M", List.of("HuggingFaceTB/SmolLM2-135M-Instruct"),
                dense("llama", 576, 1536, 30, 9, 3, 64, 49152, true, 8192, 1e-5, 100000.0, null, 0, 0)));
        entries.add(new Entry("HuggingFaceTB/SmolLM2-360M", List.of("HuggingFaceTB/SmolLM2-360M-Instruct"),
                dense("llama", 960, 2560, 32, 15, 5, 64, 49152, true, 8192, 1e-5, 100000.0, null, 0, 0)));
        entries.add(new Entry("HuggingFaceTB/SmolLM2-1.7B", List.of("HuggingFaceTB/SmolLM2-1.7B-Instruct"),
                dense("llama", 2048, 8192, 24, 32, 32, 64, 49152, true, 8192, 1e-5, 130000.0, null, 0, 0)));
        entries.add(new Entry("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", List.of("TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
                dense("llama", 2048, 5632, 22, 32, 4, 64, 32000, false, 2048, 1e-5, 10000.0, null, 1, 2)));

        // Older models that published memory measurements (research/memory-measured.tsv) were taken on.
        entries.add(new Entry("meta-llama/Meta-Llama-3-8B", List.of("meta-llama/Meta-Llama-3-8B-Instruct"),
                dense("llama", 4096, 14336, 32, 32, 8, 128, 128256, false, 8192, 1e-5, 500000.0, null, 128000, 128001)));
        entries.add(new Entry("meta-llama/Llama-3.1-405B", List.of("meta-llama/Llama-3.1-405B-Instruct", "meta-llama/Meta-Llama-3.1-405B"),
                dense("llama", 16384, 53248, 126, 128, 8, 128, 128256, false, 131072, 1e-5, 500000.0, llama31, 128000, 128001)));
        entries.add(new Entry("meta-llama/Llama-2-7b-hf", List.of("meta-llama/Llama-2-7b-chat-hf"),
                dense("llama", 4096, 11008, 32, 32, 32, 128, 32000, false, 4096, 1e-5, 10000.0, null, 1, 2)));
        entries.add(new Entry("meta-llama/Llama-2-13b-hf", List.of("meta-llama/Llama-2-13b-chat-hf"),
                dense("llama", 5120, 13824, 40, 40, 40, 128, 32000, false, 4096, 1e-5, 10000.0, null, 1, 2)));
        entries.add(new Entry("meta-llama/Llama-2-70b-hf", List.of("meta-llama/Llama-2-70b-chat-hf"),
                dense("llama", 8192, 28672, 80, 64, 8, 128, 32000, false, 4096, 1e-5, 10000.0, null, 1, 2)));
        entries.add(new Entry("mistralai/Mistral-7B-v0.1", List.of("mistralai/Mistral-7B-Instruct-v0.1"),
                dense("mistral", 4096, 14336, 32, 32, 8, 128, 32000, false, 32768, 1e-5, 10000.0, null, 1, 2)));
        entries.add(new Entry("mistralai/Mistral-7B-Instruct-v0.2", List.of(),
                dense("mistral", 4096, 14336, 32, 32, 8, 128, 32000, false, 32768, 1e-5, 1000000.0, null, 1, 2)));
        entries.add(new Entry("01-ai/Yi-34B", List.of("01-ai/Yi-34B-Chat"),
                dense("llama", 7168, 20480, 60, 56, 8, 128, 64000, false, 4096, 1e-5, 5000000.0, null, 1, 2)));

        Map<String, ModelConfig> byName = new LinkedHashMap<>();
        List<String> canonical = new ArrayList<>();
        for (Entry e : entries) {
            canonical.add(e.name());
            byName.put(key(e.name()), e.config());
            for (String alias : e.aliases()) {
                byName.put(key(alias), e.config());
            }
        }
        BY_NAME = Collections.unmodifiableMap(byName);
        CANONICAL = List.copyOf(canonical);
    }

    private KnownModels() {}

    /** The architecture of a hub model by name (case-insensitive), or empty when we do not know it. */
    public static Optional<ModelConfig> lookup(String hubName) {
        return Optional.ofNullable(BY_NAME.get(key(hubName)));
    }

    /** The canonical hub names, in table order (aliases left out). */
    public static List<String> names() {
        return CANONICAL;
    }

    private static String key(String name) {
        return name.strip().toLowerCase(Locale.ROOT);
    }

    private static ModelConfig dense(String type, int hidden, int inter, int layers, int heads, int kvHeads, int headDim,
            int vocab, boolean tied, int maxPositions, double eps, double theta, ModelConfig.RopeScaling rope,
            Integer bos, Integer eos) {
        return new ModelConfig(type, hidden, inter, layers, heads, kvHeads, headDim, vocab, maxPositions, eps, theta, rope,
                false, false, false, 2, tied, 0, 0, "bfloat16", bos, eos);
    }

    private static Entry qwen25(String name, int hidden, int inter, int layers, int heads, int kvHeads, int headDim,
            int vocab, boolean tied, int maxPositions) {
        ModelConfig config = new ModelConfig("qwen2", hidden, inter, layers, heads, kvHeads, headDim, vocab, maxPositions,
                1e-6, 1000000.0, null, true, false, false, 2, tied, 0, 0, "bfloat16", 151643, 151643);
        return new Entry(name, List.of(name + "-Instruct"), config);
    }
}
