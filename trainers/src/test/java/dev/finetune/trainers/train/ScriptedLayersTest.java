package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Decoder layers run as one compiled TorchScript module each (the default) train exactly as the same layers run op
 * by op from Java: 50 steps on one fixed batch of stories260K, LoRA with dropout (the modules draw the same masks),
 * QLoRA, full fine-tuning, with and without recomputed layers.
 */
class ScriptedLayersTest {
    private static final List<String> TARGETS =
            List.of("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj");

    private static List<Double> losses(String mode, boolean checkpointing, boolean scripted, Path dir) {
        return losses(mode, checkpointing, scripted, false, dir);
    }

    private static List<Double> losses(String mode, boolean checkpointing, boolean scripted, boolean bfloat16, Path dir) {
        List<Double> losses = new ArrayList<>();
        try (NDManager manager = NDManager.newBaseManager()) {
            LoadOptions options;
            LoraFactory factory = null;
            if (mode.equals("full")) {
                options = LoadOptions.fullFineTune();
            } else {
                factory = new LoraFactory(new AdapterSpec.Lora(4, 8, mode.equals("lora") ? 0.1 : 0, TARGETS, false,
                        false, mode.equals("qlora") ? new AdapterSpec.Nf4(64, false) : null), manager, 7);
                options = LoadOptions.adapters(factory);
            }
            LlamaModel model = LlamaModel.load(Stories260KReference.modelDir(), manager, options);
            model.setScriptedLayers(scripted);
            model.setBfloat16Compute(bfloat16);
            assertEquals(bfloat16 && scripted, model.bfloat16Compute());
            if (factory != null) {
                factory.adapters().setTraining(true);
            }
            List<SftBatch> batch = ToyData.batches(1, 3, 32, 512, 11);
            Trainer.Run run = TestRuns.in(dir).maxSteps(50).learningRate(mode.equals("full") ? 1e-3 : 1e-2)
                    .scheduler(LrScheduler.CONSTANT).checkpointing(checkpointing).build(batch.size());
            new Trainer<>(new LlamaTrainable(model), new SftObjective(), batch, List.of(), run, manager,
                    new Trainer.Listener() {
                        @Override
                        public void afterStep(long step, Map<String, Object> metrics) {
                            losses.add((Double) metrics.get("loss"));
                        }
                    }).run();
            for (NamedArray trained : model.trainable()) {
                assertEquals(DataType.FLOAT32, trained.array().getDataType(), trained.name() + " stays float32");
            }
        }
        return losses;
    }

    @ParameterizedTest(name = "{0}, recomputed layers: {1}")
    @CsvSource({"lora, false", "lora, true", "qlora, false", "full, false"})
    void fiftyStepsOnOneBatchMatchTheOpByOpLayers(String mode, boolean checkpointing, @TempDir Path dir) {
        List<Double> scripted = losses(mode, checkpointing, true, dir.resolve("scripted"));
        List<Double> opByOp = losses(mode, checkpointing, false, dir.resolve("op-by-op"));
        assertEquals(50, scripted.size());
        for (int i = 0; i < scripted.size(); i++) {
            assertEquals(opByOp.get(i), scripted.get(i), 1e-4, "step " + (i + 1));
        }
        assertTrue(scripted.get(49) < scripted.get(0) - 0.1, "the loss must fall: " + scripted);
    }

    /**
     * bf16: true (matrix multiplies and attention in bfloat16, the rest float32) trains as float32 does to within
     * bfloat16's rounding. The first loss, from the same weights, is float32's to bfloat16's relative step (2^-8);
     * after that the trajectories drift apart as any two roundings of 50 steps at a high learning rate on one batch
     * do (by up to several percent mid-run), so both must learn the batch to the same final loss within 1 %. That
     * the two differ at all shows the bfloat16 kernels ran.
     */
    @ParameterizedTest(name = "{0}, recomputed layers: {1}")
    @CsvSource({"lora, false", "lora, true", "qlora, false", "full, false"})
    void bfloat16ComputeTrainsAsFloat32ToItsRounding(String mode, boolean checkpointing, @TempDir Path dir) {
        List<Double> bfloat16 = losses(mode, checkpointing, true, true, dir.resolve("bf16"));
        List<Double> float32 = losses(mode, checkpointing, true, false, dir.resolve("fp32"));
        assertEquals(50, bfloat16.size());
        double[] relative = new double[bfloat16.size()];
        for (int i = 0; i < relative.length; i++) {
            relative[i] = Math.abs(bfloat16.get(i) - float32.get(i)) / float32.get(i);
        }
        double largest = java.util.Arrays.stream(relative).max().orElseThrow();
        System.out.printf("%s recomputed=%s: relative loss difference bf16 vs fp32: step 1 %.2e, largest of 50 %.2e, "
                + "last %.2e (losses %.4f -> %.4f vs %.4f -> %.4f)%n", mode, checkpointing, relative[0], largest,
                relative[49], bfloat16.get(0), bfloat16.get(49), float32.get(0), float32.get(49));
        assertTrue(relative[0] > 0, "bf16 compute must round differently from float32");
        assertTrue(relative[0] < 1.0 / 256, "step 1: bf16 " + bfloat16.get(0) + " vs fp32 " + float32.get(0));
        assertTrue(relative[49] < 0.01, "bf16 ended at " + bfloat16.get(49) + ", fp32 at " + float32.get(49));
        assertTrue(bfloat16.get(49) < bfloat16.get(0) - 0.1, "the loss must fall: " + bfloat16);
    }
}
