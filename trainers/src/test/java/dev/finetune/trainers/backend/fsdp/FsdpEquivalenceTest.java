package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.ValidatedRecipe;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The strongest evidence that the fsdp backend is right: the same recipe on stories260K gives the same loss at every
 * one of 10 steps on the JVM trainer, on the worker at world size 1, and on FSDP2 over 2 CPU ranks (gloo), for LoRA
 * SFT, full SFT, LoRA DPO, full DPO, and DPO continuing an SFT adapter ({@code lora_model_dir}). Two independent
 * implementations, one global batch split two ways.
 *
 * <p>The JVM run and the world-size-1 worker use gradient_accumulation_steps 2, the world-size-2 run 1: the same
 * global batch of 2 x micro.
 *
 * <p>The worker runs also hold the memory plan to the bytes of their tensors: after step 1, on 1 and on 2 ranks,
 * each plan term (weights, adapter, gradients, optimizer state) within 1 % of what the ranks hold
 * ({@link FsdpRuns#tensorsMatchPlan}).
 */
class FsdpEquivalenceTest {
    private static final double TOLERANCE = 1e-4;

    /** 10 steps with weight decay and clipping on; a checkpoint at step 5, where the resumes start. */
    private static String sft(Path dir, boolean lora) {
        StoriesRecipe recipe = StoriesRecipe.sft().set("max_steps", 10).set("learning_rate", "3e-3")
                .set("weight_decay", "0.01").set("max_grad_norm", "1.0").set("eval_steps", 5).set("save_steps", 5);
        return (lora ? recipe.lora() : recipe).yaml(dir);
    }

    private static double compare(String what, Path jvm, Path one, Path two) {
        double worst = 0;
        for (String key : List.of("loss", "eval_loss")) {
            double jvmOne = FsdpRuns.maxDelta(FsdpRuns.series(jvm, key), FsdpRuns.series(one, key), 0);
            double jvmTwo = FsdpRuns.maxDelta(FsdpRuns.series(jvm, key), FsdpRuns.series(two, key), 0);
            double oneTwo = FsdpRuns.maxDelta(FsdpRuns.series(one, key), FsdpRuns.series(two, key), 0);
            System.out.printf(Locale.ROOT, "equivalence %s %s: max |d| JVM vs ws1 %.2e, JVM vs ws2 %.2e, ws1 vs ws2 "
                    + "%.2e%n", what, key, jvmOne, jvmTwo, oneTwo);
            worst = Math.max(worst, Math.max(jvmOne, Math.max(jvmTwo, oneTwo)));
        }
        assertEquals(10, FsdpRuns.series(two, "loss").size());
        return worst;
    }

    @Test
    void loraSftMatchesTheJvmTrainerSurvivesAKilledRankReshardsAndContinuesAsDpo(@TempDir Path tmp)
            throws IOException {
        WorkerEnvironment.python();
        ValidatedRecipe jvmRecipe = FsdpRuns.recipe(tmp, "jvm", sft(tmp.resolve("jvm"), true));
        ValidatedRecipe one = FsdpRuns.recipe(tmp, "one", sft(tmp.resolve("one"), true));
        ValidatedRecipe two = FsdpRuns.recipe(tmp, "two", sft(tmp.resolve("two"), true), "gradient_accumulation_steps=1");
        Path killedDir = tmp.resolve("killed");
        ValidatedRecipe killed = FsdpRuns.recipe(tmp, "killed", sft(killedDir, true), "gradient_accumulation_steps=1");
        // the four runs that start from nothing overlap; the resumes and the DPO runs below start from their files
        CompletableFuture<Path> jvmRun = FsdpRuns.start(() -> FsdpRuns.jvm(jvmRecipe));
        CompletableFuture<FsdpBackend.Result> oneRun = FsdpRuns.start(() -> FsdpRuns.planned(one, 1));
        CompletableFuture<FsdpBackend.Result> twoRun = FsdpRuns.start(() -> FsdpRuns.planned(two, 2));
        CompletableFuture<Void> killedRun = FsdpRuns.start(() -> {
            killRankOneAfterStep7(killed, killedDir);
            return null;
        });
        FsdpRuns.joinAll(jvmRun, oneRun, twoRun, killedRun);
        Path jvm = jvmRun.join();
        FsdpBackend.Result result = twoRun.join();
        assertTrue(compare("lora-sft", jvm, tmp.resolve("one"), tmp.resolve("two")) <= TOLERANCE);
        // the single-device layout: a PEFT adapter beside the tokenizer and the resolved recipe
        for (String file : List.of("adapter_model.safetensors", "adapter_config.json", "tokenizer.json",
                "recipe.resolved.yaml", "metrics.jsonl", "loss.png")) {
            assertTrue(Files.isRegularFile(tmp.resolve("two").resolve(file)), file);
        }
        assertEquals(2, result.rankPeaks().size());
        FsdpRuns.tensorsMatchPlan("lora-sft", one, 1);
        FsdpRuns.tensorsMatchPlan("lora-sft", two, 2);

        // Resume the world-size-2 checkpoint on one rank (2 -> 1): the loss sequence continues as uninterrupted.
        ValidatedRecipe resumed = FsdpRuns.recipe(tmp, "resumed", sft(killedDir, true), "resume_from_checkpoint=true");
        ByteArrayOutputStream resumeLog = new ByteArrayOutputStream();
        CompletableFuture<FsdpBackend.Result> resumedRun = FsdpRuns.start(() -> FsdpRuns.fsdp(resumed, 1, Map.of(),
                resumeLog));
        // And the world-size-1 checkpoint on two ranks (1 -> 2).
        Path widened = tmp.resolve("widened");
        ValidatedRecipe wider = FsdpRuns.recipe(tmp, "widened", sft(widened, true), "gradient_accumulation_steps=1",
                "resume_from_checkpoint=" + tmp.resolve("one").resolve("checkpoint-5"));
        ByteArrayOutputStream widenLog = new ByteArrayOutputStream();
        CompletableFuture<FsdpBackend.Result> widenedRun = FsdpRuns.start(() -> FsdpRuns.fsdp(wider, 2, Map.of(),
                widenLog));
        // SFT, then DPO from that adapter (lora_model_dir): the reference is a frozen copy of the adapter as it
        // starts, so policy and reference agree at step 0 (margin 0), and both trainers take the same 10 steps.
        Path adapter = tmp.resolve("jvm");
        ValidatedRecipe jvmDpoRecipe = FsdpRuns.recipe(tmp, "jvm-dpo", dpo(tmp.resolve("jvm-dpo")),
                "lora_model_dir=" + adapter);
        ValidatedRecipe twoDpo = FsdpRuns.recipe(tmp, "two-dpo", dpo(tmp.resolve("two-dpo")),
                "lora_model_dir=" + adapter, "gradient_accumulation_steps=1");
        ByteArrayOutputStream dpoLog = new ByteArrayOutputStream();
        CompletableFuture<Path> jvmDpoRun = FsdpRuns.start(() -> FsdpRuns.jvm(jvmDpoRecipe));
        CompletableFuture<FsdpBackend.Result> twoDpoRun = FsdpRuns.start(() -> FsdpRuns.fsdp(twoDpo, 2, Map.of(),
                dpoLog));
        FsdpRuns.joinAll(resumedRun, widenedRun, jvmDpoRun, twoDpoRun);

        assertTrue(resumeLog.toString(StandardCharsets.UTF_8).contains("at step 5 (saved by 2 rank(s))"),
                resumeLog.toString(StandardCharsets.UTF_8));
        System.out.println("uninterrupted (2 ranks): " + FsdpRuns.series(tmp.resolve("two"), "loss"));
        System.out.println("killed at 7, resumed at 5 on 1 rank: " + FsdpRuns.series(killedDir, "loss"));
        double resumeDelta = FsdpRuns.maxDelta(FsdpRuns.series(tmp.resolve("two"), "loss"),
                FsdpRuns.series(killedDir, "loss"), 1);
        assertTrue(widenLog.toString(StandardCharsets.UTF_8).contains("at step 5 (saved by 1 rank(s))"),
                widenLog.toString(StandardCharsets.UTF_8));
        double widenDelta = FsdpRuns.maxDelta(FsdpRuns.series(tmp.resolve("one"), "loss"),
                FsdpRuns.series(widened, "loss"), 6);
        System.out.printf(Locale.ROOT, "kill after step 7 + resume 2->1: max |d loss| vs uninterrupted %.2e; "
                + "resume 1->2 from step 5: %.2e%n", resumeDelta, widenDelta);
        assertTrue(resumeDelta <= 1e-5, "2->1 resume drifted by " + resumeDelta);
        assertTrue(widenDelta <= 1e-5, "1->2 resume drifted by " + widenDelta);

        Path jvmDpo = jvmDpoRun.join();
        assertTrue(dpoLog.toString(StandardCharsets.UTF_8).contains("reference: the adapter from lora_model_dir"));
        double dpoDelta = 0;
        for (String key : List.of("loss", "eval_loss", "rewards/margins")) {
            double d = FsdpRuns.maxDelta(FsdpRuns.series(jvmDpo, key), FsdpRuns.series(tmp.resolve("two-dpo"), key),
                    0);
            System.out.printf(Locale.ROOT, "equivalence dpo from lora_model_dir %s: max |d| JVM vs ws2 %.2e%n", key, d);
            dpoDelta = Math.max(dpoDelta, d);
        }
        assertEquals(10, FsdpRuns.series(tmp.resolve("two-dpo"), "loss").size());
        assertTrue(dpoDelta <= TOLERANCE, "DPO from lora_model_dir: " + dpoDelta);
        for (Path run : List.of(jvmDpo, tmp.resolve("two-dpo"))) {
            assertEquals(0.0, FsdpRuns.series(run, "eval_rewards/margins").get(0L), 1e-6,
                    run + ": policy and reference start equal");
        }
    }

    /** Rank 1 is killed (SIGKILL) after step 7: the run fails naming it, and no rank survives. */
    private static void killRankOneAfterStep7(ValidatedRecipe killed, Path killedDir) {
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        FsdpBackend.WorkerFailed failure = assertThrows(FsdpBackend.WorkerFailed.class,
                () -> FsdpRuns.fsdp(killed, 2, Map.of("FINETUNE_WORKER_KILL_AT", "1:7"), log));
        System.out.println("killed run: " + failure.getMessage());
        assertTrue(failure.getMessage().contains("rank 1"), failure.getMessage());
        assertTrue(failure.getMessage().contains("SIGKILL") || failure.getMessage().contains("-9"),
                failure.getMessage());
        String output = log.toString(StandardCharsets.UTF_8);
        for (String line : output.split("\n")) {
            if (line.contains("started, pid ")) {
                long pid = Long.parseLong(line.substring(line.lastIndexOf(' ') + 1).strip());
                assertTrue(ProcessHandle.of(pid).map(h -> !h.isAlive()).orElse(true), "rank pid " + pid + " survived");
            }
        }
        assertTrue(Files.isDirectory(killedDir.resolve("checkpoint-5")));
    }

    /**
     * The JVM trainer, the worker at world size 1 and FSDP2 over 2 ranks on the same recipe, overlapping (none
     * needs another's files), into {@code jvm}, {@code one} and {@code two} under {@code tmp}; checks the worker runs'
     * tensor bytes against the plan; returns the JVM run's folder.
     */
    private static Path threeWays(Path tmp, String what, Function<Path, String> yaml, String... overrides)
            throws IOException {
        ValidatedRecipe jvm = FsdpRuns.recipe(tmp, "jvm", yaml.apply(tmp.resolve("jvm")), overrides);
        ValidatedRecipe one = FsdpRuns.recipe(tmp, "one", yaml.apply(tmp.resolve("one")), overrides);
        List<String> twoOverrides = new ArrayList<>(List.of(overrides));
        twoOverrides.add("gradient_accumulation_steps=1");
        ValidatedRecipe two = FsdpRuns.recipe(tmp, "two", yaml.apply(tmp.resolve("two")),
                twoOverrides.toArray(String[]::new));
        CompletableFuture<Path> jvmRun = FsdpRuns.start(() -> FsdpRuns.jvm(jvm));
        CompletableFuture<FsdpBackend.Result> oneRun = FsdpRuns.start(() -> FsdpRuns.planned(one, 1));
        CompletableFuture<FsdpBackend.Result> twoRun = FsdpRuns.start(() -> FsdpRuns.planned(two, 2));
        FsdpRuns.joinAll(jvmRun, oneRun, twoRun);
        FsdpRuns.tensorsMatchPlan(what, one, 1);
        FsdpRuns.tensorsMatchPlan(what, two, 2);
        return jvmRun.join();
    }

    @Test
    void fullSftMatchesTheJvmTrainer(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        Path jvm = threeWays(tmp, "full-sft", dir -> sft(dir, false), "learning_rate=1e-3");
        assertTrue(compare("full-sft", jvm, tmp.resolve("one"), tmp.resolve("two")) <= TOLERANCE);
        assertTrue(Files.isRegularFile(tmp.resolve("two").resolve("model.safetensors")));
    }

    private static String dpo(Path dir) {
        return dpo(dir, true);
    }

    private static String dpo(Path dir, boolean lora) {
        StoriesRecipe recipe = StoriesRecipe.dpo().set("max_steps", 10).set("eval_steps", 5).set("save_steps", 10);
        return (lora ? recipe.lora() : recipe).yaml(dir);
    }

    @Test
    void dpoMatchesTheJvmTrainer(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        Path jvm = threeWays(tmp, "dpo", FsdpEquivalenceTest::dpo);
        assertTrue(compare("dpo", jvm, tmp.resolve("one"), tmp.resolve("two")) <= TOLERANCE);
        double margins = FsdpRuns.maxDelta(FsdpRuns.series(jvm, "rewards/margins"),
                FsdpRuns.series(tmp.resolve("two"), "rewards/margins"), 1);
        System.out.printf(Locale.ROOT, "equivalence dpo rewards/margins: max |d| JVM vs ws2 %.2e%n", margins);
        assertTrue(margins <= TOLERANCE);
    }

    /** Full fine-tuning DPO: the reference is the weights before the first step, taken once by each trainer. */
    @Test
    void fullDpoMatchesTheJvmTrainer(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        Path jvm = threeWays(tmp, "full-dpo", dir -> dpo(dir, false));
        assertTrue(compare("full-dpo", jvm, tmp.resolve("one"), tmp.resolve("two")) <= TOLERANCE);
        assertTrue(Files.isRegularFile(tmp.resolve("two").resolve("model.safetensors")));
    }
}
