package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.ValidatedRecipe;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * GRPO on the fsdp backend: the ranks sample with the model under FSDP2, the launcher scores with the recipe's own
 * reward functions. The worker's sampler draws the JVM sampler's uniforms from the JVM's micro-step seeds, so on
 * stories260K the JVM trainer, the worker at world size 1 and FSDP2 over 2 CPU ranks sample the same completions
 * and their whole GRPO runs (loss, rewards, KL) agree step by step.
 */
class FsdpGrpoTest {
    private static final double TOLERANCE = 1e-4;

    private static String grpo(Path dir, String extra) {
        return """
                base_model: %s
                rl: grpo
                trl:
                  num_generations: 4
                  max_completion_length: 12
                  temperature: 1.0
                  beta: 0.04
                  epsilon: 0.2
                  reward_funcs:
                    - {name: contains, field: word}
                    - {name: length, min: 2, max: 6}
                datasets:
                  - path: %s
                    type: passthrough
                val_set_size: 0.17
                output_dir: %s
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_dropout: 0.0
                lora_target_linear: true
                sequence_len: 128
                micro_batch_size: 8
                gradient_accumulation_steps: 2
                max_steps: 6
                learning_rate: 3e-3
                lr_scheduler: cosine
                warmup_steps: 1
                eval_steps: 3
                save_steps: 3
                seed: 42
                hardware: cpu
                %s
                """.formatted(WorkerEnvironment.stories260K(), WorkerEnvironment.data("quickstart-grpo.jsonl"), dir,
                extra);
    }

    @Test
    void grpoMatchesTheJvmTrainerOnOneAndTwoRanks(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        long started = System.nanoTime();
        Path jvm = FsdpRuns.jvm(FsdpRuns.recipe(tmp, "jvm", grpo(tmp.resolve("jvm"), "")));
        long jvmDone = System.nanoTime();
        FsdpRuns.fsdp(FsdpRuns.recipe(tmp, "one", grpo(tmp.resolve("one"), "")), 1);
        long oneDone = System.nanoTime();
        ValidatedRecipe two = FsdpRuns.recipe(tmp, "two", grpo(tmp.resolve("two"), ""), "gradient_accumulation_steps=1");
        FsdpRuns.fsdp(two, 2);
        long twoDone = System.nanoTime();
        System.out.printf(Locale.ROOT, "grpo wall time: JVM %.1f s, worker ws1 %.1f s, ws2 %.1f s%n",
                (jvmDone - started) / 1e9, (oneDone - jvmDone) / 1e9, (twoDone - oneDone) / 1e9);
        double worst = 0;
        for (String key : List.of("loss", "reward", "rewards/contains/mean", "completions/mean_length", "kl",
                "entropy", "eval_loss", "eval_reward")) {
            double jvmOne = FsdpRuns.maxDelta(FsdpRuns.series(jvm, key), FsdpRuns.series(tmp.resolve("one"), key), 0);
            double jvmTwo = FsdpRuns.maxDelta(FsdpRuns.series(jvm, key), FsdpRuns.series(tmp.resolve("two"), key), 0);
            double oneTwo = FsdpRuns.maxDelta(FsdpRuns.series(tmp.resolve("one"), key),
                    FsdpRuns.series(tmp.resolve("two"), key), 0);
            System.out.printf(Locale.ROOT, "equivalence grpo %s: max |d| JVM vs ws1 %.2e, JVM vs ws2 %.2e, ws1 vs ws2 "
                    + "%.2e%n", key, jvmOne, jvmTwo, oneTwo);
            worst = Math.max(worst, Math.max(jvmOne, Math.max(jvmTwo, oneTwo)));
        }
        System.out.println("jvm loss: " + FsdpRuns.series(jvm, "loss"));
        System.out.println("ws2 loss: " + FsdpRuns.series(tmp.resolve("two"), "loss"));
        assertEquals(6, FsdpRuns.series(tmp.resolve("two"), "loss").size());
        assertTrue(worst <= TOLERANCE, "worst " + worst);
    }
}
