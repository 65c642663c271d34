package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
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
}
