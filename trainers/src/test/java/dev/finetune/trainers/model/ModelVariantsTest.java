package dev.finetune.trainers.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.training.GradientCollector;
import com.google.gson.JsonParser;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.io.HalfFloats;
import dev.finetune.adapters.io.SafetensorsDtype;
import dev.finetune.adapters.io.SafetensorsWriter;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.model.ModelConfig;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Architecture variants on tiny random models written to disk by the test, checked against {@link NaiveLlama}. */
class ModelVariantsTest {
    static final long[] IDS = {1, 17, 42, 5, 60, 3, 33, 9};

    /** Qwen2 / Qwen2.5: q, k, v biases (implied by model_type, as in real configs), untied head, large theta. */
    static final String QWEN2 = """
            {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 61,
             "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": false,
             "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}""";

    /** Qwen3: per-head q/k RMSNorm, head_dim wider than hidden/heads, tied head. */
    static final String QWEN3 = """
            {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 48,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 61,
             "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "attention_bias": false,
             "tie_word_embeddings": true, "torch_dtype": "bfloat16"}""";

    /** Llama 3.1-style RoPE scaling with a tiny original context so all three frequency bands occur; Llama biases. */
    static final String LLAMA3_SCALED = """
            {"model_type": "llama", "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 61, "rms_norm_eps": 1e-5,
             "rope_theta": 500000.0, "attention_bias": true, "mlp_bias": true, "tie_word_embeddings": false,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 64}}""";

    static final String LINEAR_SCALED = """
            {"model_type": "mistral", "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 1,
             "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 61, "rope_theta": 10000.0,
             "tie_word_embeddings": true, "rope_scaling": {"type": "linear", "factor": 4.0}}""";

    @TempDir
    Path dir;
    NDManager manager;

    @BeforeEach
    void open() {
        manager = NDManager.newBaseManager();
    }

    @AfterEach
    void close() {
        manager.close();
    }

    @Test
    void qwen2StyleModelWithBiasesMatchesTheNaiveForward() throws IOException {
        checkAgainstNaive(QWEN2, "qwen2");
    }

    @Test
    void qwen3StyleModelWithQkNormMatchesTheNaiveForward() throws IOException {
        checkAgainstNaive(QWEN3, "qwen3");
    }

    @Test
    void llama3RopeScalingAndLlamaBiasesMatchTheNaiveForward() throws IOException {
        checkAgainstNaive(LLAMA3_SCALED, "llama3");
    }

    @Test
    void linearRopeScalingMatchesTheNaiveForward() throws IOException {
        checkAgainstNaive(LINEAR_SCALED, "linear");
    }

    private void checkAgainstNaive(String configJson, String name) throws IOException {
        Path modelDir = dir.resolve(name);
        Map<String, NDArray> weights = writeModel(modelDir, configJson, 7, SafetensorsDtype.F32, false);
        LlamaModel model = LlamaModel.load(modelDir, manager, LoadOptions.inference());
        float[][] logits = logits(model, IDS);
        double[][] expected = new NaiveLlama(model.config(), floats(weights)).forward(IDS);
        double max = 0;
        double scale = 0;
        for (int t = 0; t < IDS.length; t++) {
            for (int v = 0; v < expected[t].length; v++) {
                max = Math.max(max, Math.abs(expected[t][v] - logits[t][v]));
                scale = Math.max(scale, Math.abs(expected[t][v]));
            }
        }
        assertTrue(scale > 1e-3, "logits too small to compare: " + scale);
        assertTrue(max < 1e-5, name + ": max |logit - naive| = " + max + " (logit scale " + scale + ")");
    }

    @Test
    void shardedBf16CheckpointGivesTheLogitsOfItsRoundedWeights() throws IOException {
        Path f32Dir = dir.resolve("f32");
        Path bf16Dir = dir.resolve("bf16");
        Map<String, NDArray> weights = writeModel(f32Dir, QWEN2, 3, SafetensorsDtype.F32, false);
        writeModel(bf16Dir, QWEN2, 3, SafetensorsDtype.BF16, true);
        assertTrue(Files.exists(bf16Dir.resolve("model.safetensors.index.json")));
        assertTrue(Files.list(bf16Dir).filter(p -> p.toString().endsWith(".safetensors")).count() > 1, "expected several shards");

        LlamaModel f32 = LlamaModel.load(f32Dir, manager, LoadOptions.inference());
        LlamaModel bf16 = LlamaModel.load(bf16Dir, manager, LoadOptions.inference());
        Map<String, float[]> rounded = new LinkedHashMap<>();
        for (Map.Entry<String, NDArray> e : weights.entrySet()) {
            float[] values = e.getValue().toFloatArray();
            for (int i = 0; i < values.length; i++) {
                values[i] = HalfFloats.bf16ToFloat(HalfFloats.floatToBf16(values[i]));
            }
            rounded.put(e.getKey(), values);
            assertArrayEquals(values, bf16.weights().get(e.getKey()).toFloatArray(), e.getKey() + " must be its BF16 rounding");
        }
        float[][] fromBf16 = logits(bf16, IDS);
        float[][] fromF32 = logits(f32, IDS);
        double[][] ofRounded = new NaiveLlama(bf16.config(), rounded).forward(IDS);
        double vsRounded = 0;
        double vsF32 = 0;
        for (int t = 0; t < IDS.length; t++) {
            for (int v = 0; v < fromBf16[t].length; v++) {
                vsRounded = Math.max(vsRounded, Math.abs(fromBf16[t][v] - ofRounded[t][v]));
                vsF32 = Math.max(vsF32, Math.abs(fromBf16[t][v] - fromF32[t][v]));
            }
        }
        assertTrue(vsRounded < 1e-5, "BF16 model vs its rounded weights: " + vsRounded);
        // Rounding weights to 8 mantissa bits moves these logits (scale ~0.1) by well under 1%.
        assertTrue(vsF32 > 0 && vsF32 < 2e-3, "BF16 vs F32 logits: " + vsF32);
        System.out.printf("BF16 sharded vs F32 save: max |logit diff| = %.3g; vs naive forward of rounded weights %.3g%n", vsF32, vsRounded);
    }

    /** Sample packing: two sequences in one row, positions restarting, must each compute what they compute alone. */
    @Test
    void packedSegmentsNeverSeeEachOther() throws IOException {
        writeModel(dir, QWEN3, 5, SafetensorsDtype.F32, false);
        LlamaModel model = LlamaModel.load(dir, manager, LoadOptions.inference());
        long[] a = {1, 17, 42, 5, 60};
        long[] b = {3, 33, 9, 12};
        long[] packedIds = {1, 17, 42, 5, 60, 3, 33, 9, 12, 0, 0};
        long[] positions = {0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 0};
        long[] segments = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 3};
        NDArray packed = model.forward(manager.create(packedIds).expandDims(0), manager.create(positions).expandDims(0),
                manager.create(segments).expandDims(0));
        float[][] alone = logits(model, a);
        float[][] second = logits(model, b);
        for (int t = 0; t < a.length; t++) {
            assertArrayEquals(alone[t], packed.get(new NDIndex("0, {}, :", t)).toFloatArray(), 1e-5f, "segment 0 position " + t);
        }
        for (int t = 0; t < b.length; t++) {
            assertArrayEquals(second[t], packed.get(new NDIndex("0, {}, :", a.length + t)).toFloatArray(), 1e-5f, "segment 1 position " + t);
        }
    }

    @Test
    void trainableArraysFollowTheLoadOptions() throws IOException {
        writeModel(dir, QWEN2, 1, SafetensorsDtype.F32, false);
        LlamaModel frozen = LlamaModel.load(dir, manager, LoadOptions.inference());
        assertEquals(List.of(), frozen.trainable());
        LlamaModel full = LlamaModel.load(dir, manager, LoadOptions.fullFineTune());
        Set<String> names = new HashSet<>();
        full.trainable().forEach(t -> names.add(t.name()));
        assertEquals(LlamaModel.expectedShapes(full.config()).keySet(), names);
        assertEquals(full.trainable().size(), names.size(), "no array listed twice");
    }

    /**
     * A factory may replace and free the float32 weight it is given (as QLoRA does after quantising); weights are
     * read one projection at a time, so the next one is not yet in memory when the factory runs.
     */
    @Test
    void projectionFactoryMayFreeItsInputAndWeightsArriveOneByOne() throws IOException {
        writeModel(dir, QWEN2, 4, SafetensorsDtype.F32, false);
        float[][] expected = logits(LlamaModel.load(dir, manager, LoadOptions.inference()), IDS);
        List<String> created = new ArrayList<>();
        NDManager models = manager.newSubManager();
        long[] copies = new long[1];
        long[] mostPending = new long[1];
        dev.finetune.adapters.ProjectionFactory replacing = (name, weight, bias) -> {
            created.add(name);
            long live = 0;
            for (NDArray a : models.getManagedArrays()) {
                live += a.getDataType() == DataType.FLOAT32 ? a.size() * 4 : 0;
            }
            // float32 bytes read from the file but not yet handed to a factory (besides this weight)
            mostPending[0] = Math.max(mostPending[0], live - copies[0] - weight.size() * 4);
            NDArray copy = weight.duplicate();
            copies[0] += copy.size() * 4;
            weight.close();
            return new dev.finetune.adapters.PlainProjection(name, copy, bias, false);
        };
        LlamaModel model = LlamaModel.load(dir, models, LoadOptions.adapters(replacing));
        assertEquals(15, created.size());
        float[][] actual = logits(model, IDS);
        for (int t = 0; t < IDS.length; t++) {
            assertArrayEquals(expected[t], actual[t], 1e-6f);
        }
        long notProjections = 0;
        for (Map.Entry<String, ai.djl.ndarray.types.Shape> e : LlamaModel.expectedShapes(model.config()).entrySet()) {
            notProjections += e.getKey().contains("_proj.weight") || e.getKey().equals("lm_head.weight") ? 0 : e.getValue().size() * 4;
        }
        // Only embeddings, norms, biases and a few constants may be waiting: no projection weight is read early.
        assertTrue(mostPending[0] <= notProjections + 1024, mostPending[0] + " bytes pending, allowed " + notProjections);
    }

    /**
     * Every trainable array gets the gradient that central differences of {@link NaiveLlama} predict, even with a GC
     * between forward and backward (a freed operand would show as 0, Inf or garbage, docs/engine-facts.md).
     *
     * <p>The differences are taken in float64 on the plain implementation, not on the float32 engine model: with a
     * float32 loss the step must be large for the quotient to rise above rounding, and at step 1e-2 the truncation
     * error alone reached 3% for embedding entries (rows of norm ~0.1 feed an RMSNorm), which failed a 2% check for
     * about one target in ten. In float64 a step of 1e-4 leaves truncation and rounding near 1e-7 relative, so what
     * remains is the float32 backward's own rounding (measured ≤ 3e-6 over 40 targets). The target is drawn in Java
     * from a fixed seed: the engine's generator state depends on which tests ran before in the same JVM.
     */
    @Test
    void fullFineTuneGradientsMatchFiniteDifferences() throws IOException {
        Map<String, NDArray> weights = writeModel(dir, QWEN3, 9, SafetensorsDtype.F32, false);
        LlamaModel model = LlamaModel.load(dir, manager, LoadOptions.fullFineTune());
        int vocabulary = model.config().vocabSize();
        double[] target = new double[IDS.length * vocabulary];
        java.util.SplittableRandom random = new java.util.SplittableRandom(21);
        for (int i = 0; i < target.length; i++) {
            target[i] = random.nextDouble(-1, 1);
        }
        NDArray ids = manager.create(IDS).expandDims(0);
        NDArray positions = manager.arange(0, IDS.length, 1, DataType.INT64).expandDims(0);
        float[] targetFloats = new float[target.length];
        for (int i = 0; i < target.length; i++) {
            targetFloats[i] = (float) target[i];
        }
        NDArray targetArray = dev.finetune.adapters.io.EngineTypes.owned(manager, targetFloats,
                new ai.djl.ndarray.types.Shape(1, IDS.length, vocabulary));
        try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
            NDArray loss = model.forward(ids, positions, null).mul(targetArray).sum();
            freeUnreachableBuffersAndReuseTheirMemory();
            collector.backward(loss);
        }
        Map<String, float[]> host = floats(weights);
        assertEquals(host.keySet().size(), model.trainable().size());
        for (NamedArray p : model.trainable()) {
            float[] gradient = p.array().getGradient().toFloatArray();
            int index = argMaxAbs(gradient);
            float[] original = host.get(p.name());
            double[] losses = new double[2];
            float[] stepped = new float[2];
            for (int side = 0; side < 2; side++) {
                float[] moved = original.clone();
                moved[index] = (float) (original[index] + (side == 0 ? 1e-4 : -1e-4));
                stepped[side] = moved[index];
                Map<String, float[]> perturbed = new LinkedHashMap<>(host);
                perturbed.put(p.name(), moved);
                losses[side] = dot(new NaiveLlama(model.config(), perturbed).forward(IDS), target);
            }
            // Divide by the step the float weights actually took, not the nominal one.
            double numeric = (losses[0] - losses[1]) / ((double) stepped[0] - stepped[1]);
            double relative = Math.abs(numeric - gradient[index]) / Math.abs(numeric);
            assertTrue(Math.abs(numeric) > 1e-2, p.name() + ": gradient too small to compare: " + numeric);
            assertTrue(relative < 1e-4, p.name() + "[" + index + "]: autograd " + gradient[index] + " vs numeric " + numeric);
        }
    }

    /**
     * A GC alone is not enough to expose a freed operand: direct buffers are released later by a cleaner thread, and
     * the freed bytes still hold the old value until something reuses them. So wait for the cleaner, then fill
     * freshly allocated small buffers (which land in the freed blocks) with NaN.
     */
    private static void freeUnreachableBuffersAndReuseTheirMemory() {
        System.gc();
        try {
            Thread.sleep(100);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        List<java.nio.ByteBuffer> filler = new ArrayList<>();
        for (int i = 0; i < 20_000; i++) {
            java.nio.ByteBuffer b = java.nio.ByteBuffer.allocateDirect(4 + (i % 4) * 4).order(java.nio.ByteOrder.nativeOrder());
            while (b.remaining() >= 4) {
                b.putFloat(Float.NaN);
            }
            filler.add(b);
        }
        filler.clear();
    }

    private static double dot(double[][] logits, double[] target) {
        double sum = 0;
        for (int t = 0; t < logits.length; t++) {
            for (int v = 0; v < logits[t].length; v++) {
                sum += logits[t][v] * target[t * logits[t].length + v];
            }
        }
        return sum;
    }

    @Test
    void checkpointThatDoesNotMatchTheConfigNamesTheTensor() throws IOException {
        Map<String, NDArray> weights = writeModel(dir, QWEN2, 2, SafetensorsDtype.F32, false);
        List<NamedArray> tensors = new ArrayList<>();
        weights.forEach((n, a) -> {
            if (!n.equals("model.layers.1.self_attn.k_proj.bias")) {
                tensors.add(new NamedArray(n, a));
            }
        });
        SafetensorsWriter.write(dir.resolve("model.safetensors"), tensors, SafetensorsDtype.F32, Map.of());
        UserError missing = assertThrows(UserError.class, () -> LlamaModel.load(dir, manager, LoadOptions.inference()));
        assertTrue(missing.getMessage().contains("missing 'model.layers.1.self_attn.k_proj.bias'"), missing.getMessage());

        Files.writeString(dir.resolve("config.json"), QWEN2.replace("\"intermediate_size\": 48", "\"intermediate_size\": 50"));
        UserError shape = assertThrows(UserError.class, () -> LlamaModel.load(dir, manager, LoadOptions.inference()));
        assertTrue(shape.getMessage().contains("'model.layers.0.mlp.gate_proj.weight' has shape (48, 32) but the config needs (50, 32)"),
                shape.getMessage());

        Files.writeString(dir.resolve("config.json"), QWEN2.replace("\"qwen2\"", "\"gemma2\""));
        UserError type = assertThrows(UserError.class, () -> LlamaModel.load(dir, manager, LoadOptions.inference()));
        assertTrue(type.getMessage().contains("implements llama, mistral, qwen2, qwen3, not gemma2"), type.getMessage());
        assertTrue(type.hint().contains("backend: fsdp"), type.hint());
    }

    private Map<String, NDArray> writeModel(Path modelDir, String configJson, long seed, SafetensorsDtype dtype, boolean sharded)
            throws IOException {
        Files.createDirectories(modelDir);
        Files.writeString(modelDir.resolve("config.json"), configJson);
        ModelConfig config = ModelConfig.fromJson(JsonParser.parseString(configJson).getAsJsonObject(), "test");
        Map<String, NDArray> weights = RandomWeights.create(config, manager, seed);
        List<NamedArray> tensors = new ArrayList<>();
        weights.forEach((n, a) -> tensors.add(new NamedArray(n, a)));
        if (sharded) {
            SafetensorsWriter.writeSharded(modelDir, tensors, dtype, 6_000, Map.of("format", "pt"));
        } else {
            SafetensorsWriter.write(modelDir.resolve("model.safetensors"), tensors, dtype, Map.of("format", "pt"));
        }
        return weights;
    }

    private float[][] logits(LlamaModel model, long[] ids) {
        NDArray out = model.forward(manager.create(ids).expandDims(0), manager.arange(0, ids.length, 1, DataType.INT64).expandDims(0), null);
        float[][] rows = new float[ids.length][];
        for (int t = 0; t < ids.length; t++) {
            rows[t] = out.get(new NDIndex("0, {}, :", t)).toFloatArray();
        }
        return rows;
    }

    private static Map<String, float[]> floats(Map<String, NDArray> weights) {
        Map<String, float[]> out = new LinkedHashMap<>();
        weights.forEach((n, a) -> out.put(n, a.toFloatArray()));
        return out;
    }

    private static int argMaxAbs(float[] values) {
        int best = 0;
        for (int i = 1; i < values.length; i++) {
            if (Math.abs(values[i]) > Math.abs(values[best])) {
                best = i;
            }
        }
        return best;
    }
}
