package dev.finetune.trainers.train.grpo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import com.google.gson.JsonObject;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.recipes.RewardSpec;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.data.GrpoPrompt;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.rewards.Rewards;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.TestRuns;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** GRPO through the real loop on stories260K. */
class GrpoObjectiveTest {
    static final double LEARNING_RATE = 1e-2;
    static final double WEIGHT_DECAY = 0.1;

    static List<GrpoBatch> batches(Tokenizer tokenizer, int generations) {
        List<GrpoBatch> batches = new ArrayList<>();
        for (String text : List.of("Once upon a time", "The little dog")) {
            int[] ids = tokenizer.encode(text, true);
            JsonObject fields = new JsonObject();
            fields.addProperty("word", "dog");
            batches.add(new GrpoBatch(List.of(new GrpoPrompt(java.util.Arrays.stream(ids).asLongStream().toArray(),
                    text, fields)), generations));
        }
        return batches;
    }

    static GrpoObjective.Settings settings(Tokenizer tokenizer, double beta) {
        return new GrpoObjective.Settings(6, 1.0, true, new GrpoLoss(0.2, beta),
                Set.of((long) tokenizer.special().eosId()), 0);
    }

    static java.util.function.Function<long[], String> decoder(Tokenizer tokenizer) {
        return ids -> tokenizer.decode(java.util.Arrays.stream(ids).mapToInt(Math::toIntExact).toArray(), true);
    }

    @Test
    void aConstantRewardLeavesTheWeightsAsOnlyWeightDecayMovesThem(@TempDir Path out) {
        Path dir = Stories260KReference.modelDir();
        try (NDManager manager = NDManager.newBaseManager(); Tokenizer tokenizer = Tokenizer.load(dir);
                Rewards rewards = Rewards.start(List.of(new RewardSpec.Length("always", 0, 1_000_000, "chars")),
                        List.of(), false)) {
            LlamaTrainable model = new LlamaTrainable(LlamaModel.load(dir, manager, LoadOptions.fullFineTune()));
            List<float[]> before = new ArrayList<>();
            for (NamedArray p : model.trainable()) {
                before.add(p.array().toFloatArray());
            }
            TestRuns options = TestRuns.in(out).maxSteps(2).learningRate(LEARNING_RATE)
                    .scheduler(LrScheduler.CONSTANT).weightDecay(WEIGHT_DECAY);
            List<Map<String, Object>> lines = new ArrayList<>();
            Trainer.Listener listener = new Trainer.Listener() {
                @Override
                public void afterStep(long step, Map<String, Object> metrics) {
                    lines.add(metrics);
                }
            };
            new Trainer<>(model, new GrpoObjective(settings(tokenizer, 0), model, null, rewards, decoder(tokenizer)),
                    batches(tokenizer, 3), List.of(), options.build(2), manager, listener).run();

            assertEquals(2, lines.size());
            for (Map<String, Object> line : lines) {
                assertEquals(1.0, line.get("reward"));
                assertEquals(1.0, line.get("rewards/always/mean"));
                assertEquals(0.0, line.get("rewards/always/std"));
                assertEquals(1.0, line.get("frac_reward_zero_std"));
                assertFalse(line.containsKey("kl"), "no kl at beta 0, as TRL logs");
                assertEquals(0.0, line.get("reward_std"));
                assertEquals(0.0, (double) line.get("grad_norm"), "zero advantage, zero gradient");
                assertTrue((double) line.get("completions/mean_length") >= 1);
            }
            double decay = Math.pow(1 - LEARNING_RATE * WEIGHT_DECAY, 2);
            List<NamedArray> params = model.trainable();
            for (int i = 0; i < params.size(); i++) {
                float[] now = params.get(i).array().toFloatArray();
                // the HF grouping: norm weights are not decayed
                double factor = params.get(i).name().contains("norm") ? 1 : decay;
                for (int k = 0; k < now.length; k++) {
                    assertEquals(before.get(i)[k] * factor, now[k], 1e-7, params.get(i).name() + "[" + k + "]");
                }
            }
        }
    }

    @Test
    void aRewardCommandThatDiesStopsTheRunAndKeepsTheLastCheckpoint(@TempDir Path out) {
        Path dir = Stories260KReference.modelDir();
        // answers the first two steps (two completions each), then dies
        RewardSpec.Command dies = new RewardSpec.Command("judge",
                "n=0; while read l; do n=$((n+1)); if [ $n -gt 4 ]; then echo 'judge: out of budget' >&2; exit 7; fi; "
                        + "echo $n; done", null);
        try (NDManager manager = NDManager.newBaseManager(); Tokenizer tokenizer = Tokenizer.load(dir);
                Rewards rewards = Rewards.start(List.of(dies), List.of(), true)) {
            LlamaTrainable model = new LlamaTrainable(LlamaModel.load(dir, manager, LoadOptions.fullFineTune()));
            TestRuns options = TestRuns.in(out).maxSteps(4).learningRate(LEARNING_RATE)
                    .saveEvery(1);
            Trainer<GrpoBatch> trainer = new Trainer<>(model, new GrpoObjective(settings(tokenizer, 0), model, null,
                    rewards, decoder(tokenizer)), batches(tokenizer, 2), List.of(), options.build(2), manager,
                    new Trainer.Listener() {});
            UserError e = assertThrows(UserError.class, trainer::run);
            assertTrue(e.oneLine().contains("exited with code 7") && e.oneLine().contains("out of budget"),
                    e.oneLine());
            List<CheckpointStore.Saved> kept = new CheckpointStore(out, 0).complete();
            assertEquals(2L, kept.get(kept.size() - 1).step(), "the checkpoint of the last finished step stays");
        }
    }

    @Test
    void fullFineTuningWithAKlTermIsRefused() {
        Path dir = Stories260KReference.modelDir();
        try (NDManager manager = NDManager.newBaseManager(); Tokenizer tokenizer = Tokenizer.load(dir)) {
            LlamaTrainable model = new LlamaTrainable(LlamaModel.load(dir, manager, LoadOptions.fullFineTune()));
            // validate refuses such a recipe (malformed/grpo-beta-full-finetune.yaml); the objective guards itself
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new GrpoObjective(
                    settings(tokenizer, 0.04), model, null, null, decoder(tokenizer)));
            assertTrue(e.getMessage().contains("needs a reference model"), e.getMessage());
        }
    }
}
