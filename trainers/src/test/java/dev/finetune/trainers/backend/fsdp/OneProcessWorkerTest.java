package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
 * What one GPU runs, minus CUDA: the torch worker as one process (no torchrun, no FSDP) with its fast path on (the LM
 * head inside the loss in chunks, per-document attention without a dense mask), against the JVM trainer on the same
 * recipe over 20 steps: LoRA SFT, full SFT and LoRA DPO, loss and eval loss within 1e-4 at every step.
 */
class OneProcessWorkerTest {
    private static final double TOLERANCE = 1e-4;

    /** 20 steps with weight decay and clipping on, so both trainers' handling of them is compared. */
    private static String sft(Path dir, boolean lora, String learningRate) {
        StoriesRecipe recipe = StoriesRecipe.sft().set("max_steps", 20).set("learning_rate", learningRate)
                .set("weight_decay", "0.01").set("max_grad_norm", "1.0").set("eval_steps", 10).set("save_steps", 20);
        return (lora ? recipe.lora() : recipe).yaml(dir);
    }

    private static String dpo(Path dir) {
        return StoriesRecipe.dpo().lora().set("max_steps", 20).set("eval_steps", 10).set("save_steps", 20).yaml(dir);
    }

    private record Case(String name, ValidatedRecipe jvm, ValidatedRecipe worker, Path jvmDir, Path workerDir) {}

    private static Case of(Path tmp, String name, java.util.function.Function<Path, String> yaml) throws IOException {
        return new Case(name, FsdpRuns.recipe(tmp, name + "-jvm", yaml.apply(tmp.resolve(name + "-jvm"))),
                FsdpRuns.recipe(tmp, name + "-worker", yaml.apply(tmp.resolve(name + "-worker"))),
                tmp.resolve(name + "-jvm"), tmp.resolve(name + "-worker"));
    }

    @Test
    void loraFullAndDpoLossesEqualTheJvmTrainersOver20Steps(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        List<Case> cases = List.of(
                of(tmp, "lora-sft", dir -> sft(dir, true, "3e-3")),
                of(tmp, "full-sft", dir -> sft(dir, false, "1e-3")),
                of(tmp, "lora-dpo", OneProcessWorkerTest::dpo));
        // the worker processes overlap; the JVM trainer runs one run at a time (one gradient collector per JVM)
        List<CompletableFuture<String>> workers = cases.stream().map(c -> FsdpRuns.start(() -> {
            ByteArrayOutputStream log = new ByteArrayOutputStream();
            FsdpRuns.fsdp(c.worker(), 1, Map.of(), log);
            return log.toString(StandardCharsets.UTF_8);
        })).toList();
        CompletableFuture<Void> jvm = FsdpRuns.start(() -> {
            for (Case c : cases) {
                FsdpRuns.jvm(c.jvm());
            }
            return null;
        });
        List<CompletableFuture<?>> all = new java.util.ArrayList<>(workers);
        all.add(jvm);
        FsdpRuns.joinAll(all.toArray(CompletableFuture[]::new));
        double worst = 0;
        for (int i = 0; i < cases.size(); i++) {
            Case run = cases.get(i);
            String log = workers.get(i).join();
            // one process, started without torchrun, with the fast path's pieces
            assertTrue(log.contains("1 rank (one process, no torchrun, no FSDP) on CPU"), log);
            assertTrue(log.contains("kernels: head inside the loss, in chunks; attention sdpa_documents"), log);
            // no fast-path piece fell back (the worker's own notes; the data's are printed as "  note:")
            assertFalse(log.contains("] note:"), log);
            assertTrue(Files.isRegularFile(run.workerDir().resolve("worker/logs/rank0.log")));
            for (String key : List.of("loss", "eval_loss")) {
                double delta = FsdpRuns.maxDelta(FsdpRuns.series(run.jvmDir(), key),
                        FsdpRuns.series(run.workerDir(), key), 0);
                System.out.printf(Locale.ROOT, "one-process worker %s %s over %d steps: max |d| vs JVM %.2e%n",
                        run.name(), key, FsdpRuns.series(run.workerDir(), "loss").size(), delta);
                worst = Math.max(worst, delta);
            }
            assertEquals(20, FsdpRuns.series(run.workerDir(), "loss").size());
        }
        assertTrue(worst <= TOLERANCE, "worst " + worst);
    }
}
