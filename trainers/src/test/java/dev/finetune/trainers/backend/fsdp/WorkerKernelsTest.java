package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.adapters.nf4.Codebook;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The worker's single-GPU fast path, piece by piece on CPU: the Python suites under
 * {@code src/test/resources/worker} run against the worker's source with the venv's real torch, transformers and
 * PEFT. Each piece is held to the plain path within 1e-5, and the LM head inside the loss also to the JVM trainer's
 * own TorchScript of it ({@code token_scores.py}); QLoRA's NF4 codebook to the JVM's {@link Codebook#NF4}.
 */
class WorkerKernelsTest {

    /** The LM head inside the loss against the whole logits and against the JVM's HeadSftLoss/HeadTokenLogProbs. */
    @Test
    void theHeadInsideTheLossEqualsThePlainPathAndTheJvmsModule() throws Exception {
        run("test_head_loss", Map.of("FINETUNE_TOKEN_SCORES", WorkerEnvironment.repoRoot()
                .resolve("trainers/src/main/resources/dev/finetune/trainers/train/token_scores.py").toString()));
    }

    /** Head, per-document attention, compiled layers, offloaded checkpoints, LoRA: each and all vs the plain path. */
    @Test
    void everyFastPathPieceEqualsThePlainPathOnRealFamilies() throws Exception {
        run("test_kernels", Map.of());
    }

    /** A rank's tensor bytes per plan term, counted alike for real tensors and on the meta device (meta-terms). */
    @Test
    void tensorTermsCountRealAndMetaStoragesAlike() throws Exception {
        run("test_memory", Map.of());
    }

    /** bitsandbytes refusals, NF4 as the JVM stores it, fused AdamW. */
    @Test
    void qloraMeansTheSameAndIsRefusedWithoutBitsandbytes(@TempDir Path dir) throws Exception {
        Path recipe = dir.resolve("qlora.yaml");
        Files.writeString(recipe, """
                base_model: %s
                adapter: qlora
                load_in_4bit: true
                lora_r: 8
                lora_alpha: 16
                lora_target_linear: true
                datasets:
                  - path: %s
                    type: completion
                output_dir: %s
                sequence_len: 64
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                max_steps: 1
                learning_rate: 1e-4
                """.formatted(WorkerEnvironment.stories260K(), WorkerEnvironment.data("quickstart.jsonl"),
                dir.resolve("out")));
        AdapterSpec.Lora lora = (AdapterSpec.Lora) ValidatedRecipe.load(recipe, List.of()).recipe().adapter();
        StringBuilder codes = new StringBuilder("[");
        for (float code : Codebook.NF4.codes()) {
            codes.append(codes.length() > 1 ? ", " : "").append(code);
        }
        run("test_extras", Map.of("FINETUNE_JVM_NF4", codes.append("]").toString(),
                "FINETUNE_JVM_NF4_BLOCK", Integer.toString(lora.quantization().blockSize())));
    }

    /** {@code python -m unittest MODULE -v} in the suites' folder; fails with its output unless every test passed. */
    static void run(String module, Map<String, String> environment) throws IOException, InterruptedException {
        Path root = WorkerEnvironment.repoRoot();
        ProcessBuilder builder = new ProcessBuilder(WorkerEnvironment.python(), "-m", "unittest", module, "-v")
                .directory(root.resolve("trainers/src/test/resources/worker").toFile())
                .redirectErrorStream(true);
        builder.environment().put("PYTHONPATH", root.resolve("trainers/src/main/python").toString());
        builder.environment().put("OMP_NUM_THREADS", "1");
        builder.environment().put("HF_HUB_OFFLINE", "1");
        builder.environment().putAll(environment);
        Path log = Files.createTempFile("worker-" + module, ".log");
        try {
            Process process = builder.redirectOutput(log.toFile()).start();
            boolean ended = process.waitFor(600, TimeUnit.SECONDS);
            if (!ended) {
                process.destroyForcibly();
            }
            String output = Files.readString(log, StandardCharsets.UTF_8);
            System.out.println(output);
            assertTrue(ended, module + " ran past 600 s:\n" + output);
            assertEquals(0, process.exitValue(), module + " failed:\n" + output);
            assertTrue(output.contains("\nOK"), module + " did not report OK:\n" + output);
        } finally {
            Files.deleteIfExists(log);
        }
    }
}
