package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
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

    private static final String REWARDS = """
                - {name: contains, field: word}
                - {name: length, min: 2, max: 6}""";

    private static String grpo(Path dir, String rewards) {
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
                %s
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
                """.formatted(WorkerEnvironment.stories260K(), "    " + rewards.replace("\n", "\n    "),
                WorkerEnvironment.data("quickstart-grpo.jsonl"), dir);
    }

    @Test
    void grpoMatchesTheJvmTrainerOnOneAndTwoRanks(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        ValidatedRecipe jvmRecipe = FsdpRuns.recipe(tmp, "jvm", grpo(tmp.resolve("jvm"), REWARDS));
        ValidatedRecipe one = FsdpRuns.recipe(tmp, "one", grpo(tmp.resolve("one"), REWARDS));
        ValidatedRecipe two = FsdpRuns.recipe(tmp, "two", grpo(tmp.resolve("two"), REWARDS), "gradient_accumulation_steps=1");
        // the three runs overlap: none needs another's files
        CompletableFuture<Path> jvmRun = FsdpRuns.start(() -> timed("JVM", () -> FsdpRuns.jvm(jvmRecipe)));
        CompletableFuture<FsdpBackend.Result> oneRun = FsdpRuns.start(() -> timed("worker ws1",
                () -> FsdpRuns.planned(one, 1)));
        CompletableFuture<FsdpBackend.Result> twoRun = FsdpRuns.start(() -> timed("worker ws2",
                () -> FsdpRuns.planned(two, 2)));
        FsdpRuns.joinAll(jvmRun, oneRun, twoRun);
        Path jvm = jvmRun.join();
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
        FsdpRuns.tensorsMatchPlan("grpo lora", one, 1);
        FsdpRuns.tensorsMatchPlan("grpo lora", two, 2);
        for (String name : List.of("reward", "reward_std", "frac_reward_zero_std", "rewards/contains/mean",
                "rewards/length/std", "completions/mean_length", "completions/clipped_ratio", "kl", "entropy",
                "clip_ratio/region_mean")) {
            assertEquals(6, FsdpRuns.series(tmp.resolve("two"), name).size(), "TRL's " + name + " every step");
        }
        assertTrue(Files.isRegularFile(tmp.resolve("two").resolve("adapter_model.safetensors")));

        // Rank 1 is killed (SIGKILL) after step 4: the run fails naming it, and no process is left behind. This run
        // samples the other way, all-gathering in every forward with the ranks in lockstep (eval's 5 batches over 2
        // ranks make one rank run a rollout it throws away): the same completions, so the same numbers.
        Path killedDir = tmp.resolve("killed");
        ValidatedRecipe killed = FsdpRuns.recipe(tmp, "killed", grpo(killedDir, REWARDS), "gradient_accumulation_steps=1");
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        FsdpBackend.WorkerFailed failure = assertThrows(FsdpBackend.WorkerFailed.class,
                () -> FsdpRuns.fsdp(killed, 2, Map.of("FINETUNE_WORKER_KILL_AT", "1:4", "FINETUNE_GRPO_ROLLOUT",
                        "per-token"), log));
        System.out.println("killed run: " + failure.getMessage());
        assertTrue(failure.getMessage().contains("rank 1"), failure.getMessage());
        assertTrue(log.toString(StandardCharsets.UTF_8).contains("grpo: sampling per-token"));
        assertNothingLeft(log);
        assertTrue(Files.isDirectory(killedDir.resolve("checkpoint-3")));

        // Resumed on one rank from the 2-rank checkpoint: the same completions, the same losses as uninterrupted.
        ValidatedRecipe resumed = FsdpRuns.recipe(tmp, "resumed", grpo(killedDir, REWARDS), "resume_from_checkpoint=true");
        ByteArrayOutputStream resumeLog = new ByteArrayOutputStream();
        FsdpRuns.fsdp(resumed, 1, Map.of(), resumeLog);
        assertTrue(resumeLog.toString(StandardCharsets.UTF_8).contains("at step 3 (saved by 2 rank(s))"));
        for (String key : List.of("loss", "reward", "kl", "eval_loss", "eval_reward")) {
            double delta = FsdpRuns.maxDelta(FsdpRuns.series(tmp.resolve("two"), key), FsdpRuns.series(killedDir, key),
                    0);
            System.out.printf(Locale.ROOT, "grpo per-token ws2 killed after step 4 + resume 2->1 from step 3, vs "
                    + "gathered ws2: max |d %s| %.2e%n", key, delta);
            assertTrue(delta <= 1e-5, key + " drifted by " + delta);
        }
    }

    /**
     * GRPO continuing an adapter ({@code lora_model_dir}) with beta > 0: the reference is a frozen copy of that
     * adapter as it starts (TRL's "ref" adapter), not the base, so the KL starts at 0; the JVM trainer and FSDP2 over
     * 2 ranks take the same steps.
     */
    @Test
    void grpoFromASavedAdapterKeepsItFrozenAsTheReference(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        // an adapter that moved away from the base (B no longer 0): 3 GRPO steps on the JVM
        Path adapter = FsdpRuns.jvm(FsdpRuns.recipe(tmp, "start", grpo(tmp.resolve("start"), REWARDS), "max_steps=3"));
        ValidatedRecipe jvmFromRecipe = FsdpRuns.recipe(tmp, "jvm-from", grpo(tmp.resolve("jvm-from"), REWARDS),
                "lora_model_dir=" + adapter, "max_steps=3");
        ByteArrayOutputStream fromLog = new ByteArrayOutputStream();
        Path twoFrom = tmp.resolve("two-from");
        ValidatedRecipe twoFromRecipe = FsdpRuns.recipe(tmp, "two-from", grpo(twoFrom, REWARDS),
                "lora_model_dir=" + adapter, "max_steps=3", "gradient_accumulation_steps=1");
        // both continue the adapter written above and overlap each other
        CompletableFuture<Path> jvmFromRun = FsdpRuns.start(() -> FsdpRuns.jvm(jvmFromRecipe));
        CompletableFuture<FsdpBackend.Result> twoFromRun = FsdpRuns.start(() -> {
            try {
                return FsdpRuns.fsdp(twoFromRecipe, 2, Map.of(), fromLog);
            } finally {
                System.out.println(fromLog.toString(StandardCharsets.UTF_8));
            }
        });
        FsdpRuns.joinAll(jvmFromRun, twoFromRun);
        Path jvmFrom = jvmFromRun.join();
        assertTrue(fromLog.toString(StandardCharsets.UTF_8).contains("reference: the adapter from lora_model_dir"));
        double fromWorst = 0;
        for (String key : List.of("loss", "reward", "kl", "eval_loss", "eval_kl")) {
            double d = FsdpRuns.maxDelta(FsdpRuns.series(jvmFrom, key), FsdpRuns.series(twoFrom, key), 0);
            System.out.printf(Locale.ROOT, "equivalence grpo from lora_model_dir %s: max |d| JVM vs ws2 %.2e%n", key, d);
            fromWorst = Math.max(fromWorst, d);
        }
        System.out.println("grpo from lora_model_dir, kl: JVM " + FsdpRuns.series(jvmFrom, "kl") + ", ws2 "
                + FsdpRuns.series(twoFrom, "kl"));
        assertEquals(3, FsdpRuns.series(twoFrom, "loss").size());
        assertTrue(fromWorst <= TOLERANCE, "GRPO from lora_model_dir: " + fromWorst);
        for (Path run : List.of(jvmFrom, twoFrom)) {
            assertEquals(0.0, FsdpRuns.series(run, "eval_kl").get(0L), 1e-7, run + ": policy = reference at step 0");
            assertEquals(0.0, FsdpRuns.series(run, "kl").get(1L), 1e-7, run + ": the first step's KL");
        }
    }

    @Test
    void aFailingRewardCommandFailsTheRunInOneLineAndLeavesNoProcess(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        // answers the first completion, then exits: the launcher's CommandReward reports it
        String reward = "- {name: judge, command: 'read line; echo 1; exit 3', timeout: 60}";
        ValidatedRecipe recipe = FsdpRuns.onRanks(FsdpRuns.recipe(tmp, "failing", grpo(tmp.resolve("failing"), reward),
                "gradient_accumulation_steps=1"), 2);
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        Launch launch = Launch.local(recipe.run(), WorkerEnvironment.python());
        UserError error = assertThrows(UserError.class, () -> FsdpBackend.train(recipe, new FsdpBackend.Settings(
                launch, null, FsdpRuns.writer(log), Map.of(), true)));
        System.out.println("failing reward command: " + error.oneLine());
        assertTrue(error.oneLine().contains("judge"), error.oneLine());
        assertFalse(error.oneLine().contains("\n"), error.oneLine());
        assertNothingLeft(log);

        // and without --allow-commands nothing starts at all
        UserError refused = assertThrows(UserError.class, () -> FsdpBackend.train(recipe, new FsdpBackend.Settings(
                launch, null, FsdpRuns.writer(new ByteArrayOutputStream()), Map.of(), false)));
        assertTrue(refused.oneLine().contains("--allow-commands"), refused.oneLine());
    }

    /** {@code run}, its wall time printed (alongside others, so it says how long this one took, not its cost). */
    private static <T> T timed(String what, java.util.function.Supplier<T> run) {
        long started = System.nanoTime();
        try {
            return run.get();
        } finally {
            System.out.printf(Locale.ROOT, "grpo wall time: %s %.1f s%n", what, (System.nanoTime() - started) / 1e9);
        }
    }

    /** Every rank the log names has exited, and this JVM has no child left (no rank, no reward command). */
    private static void assertNothingLeft(ByteArrayOutputStream log) {
        for (String line : log.toString(StandardCharsets.UTF_8).split("\n")) {
            if (line.contains("started, pid ")) {
                long pid = Long.parseLong(line.substring(line.lastIndexOf(' ') + 1).strip());
                assertTrue(ProcessHandle.of(pid).map(h -> !h.isAlive()).orElse(true), "rank pid " + pid + " survived");
            }
        }
        List<ProcessHandle> children = ProcessHandle.current().descendants().filter(ProcessHandle::isAlive).toList();
        assertTrue(children.isEmpty(), "left behind: " + children.stream().map(h -> h.pid() + " "
                + h.info().commandLine().orElse("?")).toList());
    }
}
