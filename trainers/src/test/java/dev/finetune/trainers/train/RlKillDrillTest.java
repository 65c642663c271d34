package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.output.MetricsLog;
import java.nio.file.Path;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The SFT kill drill for DPO and GRPO: {@code kill -9} after a checkpoint, resume, and every later loss, reward
 * metric and the final adapter and moments equal an uninterrupted run's bit for bit. For GRPO that needs the
 * rollouts themselves to repeat: they are seeded from the step.
 */
class RlKillDrillTest {
    private static final List<String> DPO = List.of("loss", "grad_norm", "learning_rate", "eval_loss",
            "rewards/chosen", "rewards/rejected", "rewards/margins", "eval_rewards/accuracies");
    private static final List<String> GRPO = List.of("loss", "grad_norm", "learning_rate", "eval_loss", "reward",
            "reward_std", "rewards/the/mean", "rewards/short/mean", "kl", "completions/mean_length", "clip_ratio/region_mean",
            "eval_reward");

    private static void drill(Path dir, String objective, List<String> exact) throws Exception {
        Path reference = dir.resolve(objective + "-uninterrupted");
        assertEquals(0, KillDrillTest.runToEnd(reference, 8, "stories260K", objective).exitCode());
        List<JsonObject> lines = MetricsLog.read(reference.resolve(MetricsLog.FILE));
        for (String key : exact) {
            assertTrue(lines.get(KillDrillMain.MAX_STEPS).has(key), key + " in " + lines.get(KillDrillMain.MAX_STEPS));
        }
        int killStep = KillDrillMain.SAVE_STEPS + 1 + new Random().nextInt(KillDrillMain.MAX_STEPS
                - KillDrillMain.SAVE_STEPS - 1);
        Path killed = dir.resolve(objective + "-killed");
        KillDrillTest.killAt(KillDrillTest.start(killed, 8, 150, -1, "stories260K", objective), "STEP " + killStep);
        assertFalse(new CheckpointStore(killed, 2).complete().isEmpty(), "killed after step " + killStep);
        assertEquals(0, KillDrillTest.runToEnd(killed, 8, "stories260K", objective).exitCode());
        KillDrillTest.assertSameRun(reference, killed, exact);
    }

    @Test
    @Timeout(300)
    void dpoResumesExactlyAfterAKill(@TempDir Path dir) throws Exception {
        drill(dir, "dpo", DPO);
    }

    @Test
    @Timeout(300)
    void grpoResumesExactlyWithTheSameRolloutsAfterAKill(@TempDir Path dir) throws Exception {
        drill(dir, "grpo", GRPO);
    }
}
