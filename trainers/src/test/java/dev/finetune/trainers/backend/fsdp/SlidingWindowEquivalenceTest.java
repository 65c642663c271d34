package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.families.TinyFamilies;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Mistral with a sliding window of 4 keys over packed 64-token rows: the JVM trainer (its mask with the window) and
 * the worker (transformers with the window in the worker's mask) take the same 10 LoRA steps, loss for loss.
 */
class SlidingWindowEquivalenceTest {

    @Test
    void jvmTrainerAndWorkerAgreeOnTenStepsOfAWindowedMistral(@TempDir Path tmp) throws Exception {
        WorkerEnvironment.python();
        String yaml = """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                output_dir: %%s
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_dropout: 0.0
                lora_target_linear: true
                sequence_len: 64
                sample_packing: true
                micro_batch_size: 2
                gradient_accumulation_steps: 2
                max_steps: 10
                learning_rate: 3e-3
                lr_scheduler: cosine
                warmup_steps: 2
                max_grad_norm: 1.0
                save_steps: 10
                seed: 7
                hardware: cpu
                """.formatted(TinyFamilies.model("mistral"), WorkerEnvironment.data("quickstart.jsonl"));
        ValidatedRecipe jvm = FsdpRuns.recipe(tmp, "jvm", yaml.formatted(tmp.resolve("jvm")), "backend=single");
        ValidatedRecipe one = FsdpRuns.recipe(tmp, "one", yaml.formatted(tmp.resolve("one")), "backend=fsdp");
        CompletableFuture<Path> jvmRun = FsdpRuns.start(() -> FsdpRuns.jvm(jvm));
        CompletableFuture<FsdpBackend.Result> oneRun = FsdpRuns.start(() -> FsdpRuns.fsdp(one, 1));
        FsdpRuns.joinAll(jvmRun, oneRun);
        double delta = FsdpRuns.maxDelta(FsdpRuns.series(tmp.resolve("jvm"), "loss"),
                FsdpRuns.series(tmp.resolve("one"), "loss"), 0);
        System.out.printf(Locale.ROOT, "windowed mistral, 10 LoRA steps: max |loss JVM - loss worker| = %.2e; losses %s%n",
                delta, FsdpRuns.series(tmp.resolve("jvm"), "loss"));
        assertEquals(10, FsdpRuns.series(tmp.resolve("one"), "loss").size());
        assertTrue(delta <= 1e-4, "max |d loss| " + delta);
    }
}
