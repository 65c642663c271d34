package dev.finetune.trainers.model;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.nf4.Nf4Quantized;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.adapters.peft.LoraMerge;
import dev.finetune.recipes.AdapterSpec;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** LoRA and QLoRA on the real Llama model (stories260K): adapter off = base, merge = base + adapter, QLoRA trains. */
@SuppressWarnings("try") // scopes are held only for their extent
class LoraOnLlamaTest {
    private static final long[] PROMPT = {1, 403, 407, 261, 378, 429, 261, 1221 % 512, 300, 301};

    private static float[] logits(LlamaModel model) {
        try (NDManager step = model.manager().newSubManager(); NDScope ignored = new NDScope()) {
            NDArray ids = step.create(PROMPT).expandDims(0);
            NDArray positions = step.arange(0, PROMPT.length, 1, DataType.INT64).expandDims(0);
            return model.forward(ids, positions, null).toFloatArray();
        }
    }

    private static void randomizeLoraB(LlamaModel model, long seed) {
        Random random = new Random(seed);
        for (NamedArray param : model.trainable()) {
            if (param.name().endsWith("lora_B.weight")) {
                float[] values = new float[Math.toIntExact(param.array().size())];
                for (int i = 0; i < values.length; i++) {
                    values[i] = (float) (random.nextGaussian() * 0.05);
                }
                param.array().set(values);
            }
        }
    }

    private static float maxAbsDiff(float[] a, float[] b) {
        float worst = 0;
        for (int i = 0; i < a.length; i++) {
            worst = Math.max(worst, Math.abs(a[i] - b[i]));
        }
        return worst;
    }

    @Test
    void adapterOffIsTheBaseAndTheMergedModelIsBasePlusAdapter(@TempDir Path out) {
        Path dir = Stories260KReference.modelDir();
        AdapterSpec.Lora spec = new AdapterSpec.Lora(4, 8, 0, List.of(), true, false, null);
        try (NDManager manager = NDManager.newBaseManager()) {
            float[] base = logits(LlamaModel.load(dir, manager, LoadOptions.inference()));
            LoraFactory factory = new LoraFactory(spec, manager, 7);
            LlamaModel adapted = LlamaModel.load(dir, manager, LoadOptions.adapters(factory));
            assertEquals(5 * 7, factory.requireMatches().size(), "q,k,v,o,gate,up,down in 5 layers; no lm_head");
            assertEquals(5 * 7 * 2, adapted.trainable().size(), "only lora_A and lora_B train");
            randomizeLoraB(adapted, 3);
            float[] withAdapter = logits(adapted);
            try (AdapterSwitch.Restore off = factory.adapters().disabled()) {
                assertEquals(0f, maxAbsDiff(base, logits(adapted)), "adapter off reproduces the base exactly");
            }
            assertTrue(maxAbsDiff(base, withAdapter) > 1e-2, "the adapter changes the logits");

            AdapterFiles.write(out, AdapterConfig.of(spec, factory.peftTargets(), dir.toString()), adapted.trainable());
            AdapterFiles.Saved saved = AdapterFiles.read(out, manager);
            LlamaModel baseAgain = LlamaModel.load(dir, manager, LoadOptions.inference());
            Map<String, NDArray> merged = LoraMerge.merge(baseAgain.weights(), saved.config(), saved.tensors(),
                    out.toString());
            LlamaModel mergedModel = LlamaModel.fromWeights(adapted.config(), manager, merged,
                    new LoadOptions(PlainProjection.frozenFactory(), false, false));
            float diff = maxAbsDiff(withAdapter, logits(mergedModel));
            System.out.printf("stories260K LoRA r=4 on all linear layers: merged vs base+adapter logits max |diff| %.3g%n",
                    diff);
            assertTrue(diff < 1e-4f, "merged logits differ by " + diff);
        }
    }

    @Test
    void qloraOnLlamaGivesGradientsOnlyToTheAdapter() {
        Path dir = Stories260KReference.modelDir();
        AdapterSpec.Lora spec = new AdapterSpec.Lora(4, 8, 0, List.of("q_proj", "v_proj"), false, false,
                new AdapterSpec.Nf4(64, true));
        try (NDManager manager = NDManager.newBaseManager()) {
            float[] base = logits(LlamaModel.load(dir, manager, LoadOptions.inference()));
            LoraFactory factory = new LoraFactory(spec, manager, 7);
            LlamaModel qlora = LlamaModel.load(dir, manager, LoadOptions.adapters(factory));
            float[] quantized = logits(qlora);

            // The same model with every projection weight replaced by its Java-side NF4 round trip.
            LlamaModel reference = LlamaModel.load(dir, manager, LoadOptions.inference());
            Map<String, NDArray> roundTripped = new LinkedHashMap<>(reference.weights());
            roundTripped.replaceAll((name, w) -> name.endsWith("_proj.weight")
                    ? manager.create(Nf4Quantized.quantize(w.toFloatArray(), w.getShape(), spec.quantization())
                            .dequantize(), w.getShape())
                    : w);
            float[] expected = logits(LlamaModel.fromWeights(reference.config(), manager, roundTripped,
                    new LoadOptions(PlainProjection.frozenFactory(), false, false)));
            float diff = maxAbsDiff(expected, quantized);
            System.out.printf("stories260K QLoRA (NF4, double quant): logits vs float32 base max |diff| %.3g,"
                    + " vs the Java NF4 round trip %.3g%n", maxAbsDiff(base, quantized), diff);
            assertTrue(diff < 1e-4f, "QLoRA forward differs from the dequantized model by " + diff);
            try (NDManager step = manager.newSubManager(); NDScope ignored = new NDScope();
                    GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                NDArray ids = step.create(PROMPT).expandDims(0);
                NDArray positions = step.arange(0, PROMPT.length, 1, DataType.INT64).expandDims(0);
                collector.backward(qlora.forward(ids, positions, null).logSoftmax(-1).sum());
            }
            assertEquals(5 * 2 * 2, qlora.trainable().size());
            for (NamedArray param : qlora.trainable()) {
                assertTrue(param.name().contains(".lora_"), param.name());
                try (NDArray gradient = param.array().getGradient()) {
                    if (param.name().endsWith("lora_A.weight")) {
                        continue; // B = 0 at the start, so A's gradient is exactly zero, as in PEFT
                    }
                    assertTrue(gradient.abs().sum().getFloat() > 0, param.name() + " gets a gradient");
                }
            }
        }
    }
}
