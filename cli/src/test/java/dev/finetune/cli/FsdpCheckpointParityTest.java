package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonParser;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The fsdp worker's {@code checkpoint-N} folders are what the Hugging Face stack opens, as the JVM trainer's are
 * ({@link PeftParityTest}): PEFT loads a LoRA checkpoint with no missing or unexpected key, transformers loads a full
 * fine-tune's, both give our {@code generate --json} logits within {@link HfViews#LOGIT_BAR},
 * {@code TrainerState.load_from_json} reads
 * {@code trainer_state.json}, {@code merge-lora} takes a checkpoint, and a checkpoint whose bytes changed is refused
 * (exit 2) before any rank starts; and after the first step each rank's measured peak is set beside the plan's.
 * Runs are 2 CPU ranks under torchrun.
 */
class FsdpCheckpointParityTest {
    private static Path recipe(Path dir, String name, String adapter) throws Exception {
        Path root = MainProcessTest.repoRoot();
        Path recipe = dir.resolve(name + ".yaml");
        Files.writeString(recipe, """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                val_set_size: 0.05
                output_dir: %s
                %s
                sequence_len: 128
                sample_packing: true
                micro_batch_size: 2
                gradient_accumulation_steps: 1
                max_steps: 4
                learning_rate: 3e-3
                save_steps: 2
                eval_steps: 2
                seed: 5
                hardware: cpu
                backend: fsdp
                """.formatted(root.resolve("configs/models/stories260K"), root.resolve("configs/data/quickstart.jsonl"),
                dir.resolve(name), adapter));
        return recipe;
    }

    private static PeftParityTest.Run fsdp(Path recipe, String... overrides) throws Exception {
        List<String> args = new ArrayList<>(List.of(recipe.toString()));
        args.addAll(List.of(overrides));
        args.addAll(List.of("--nproc-per-node", "2", "--python", PythonStack.python().toString()));
        return PeftParityTest.finetune(args.toArray(String[]::new));
    }

    private static void trainerState(HfViews views, int handle, int step) {
        com.google.gson.JsonObject state = views.result(handle);
        assertEquals(step, state.get("global_step").getAsInt(), "TrainerState.load_from_json: global_step");
        // step 0's evaluation, then a training entry per step and an evaluation entry every eval_steps
        assertEquals(1 + step + step / 2, state.get("log_history").getAsInt(),
                "log_history entries up to step " + step);
    }

    @Test
    @Timeout(1200)
    void everyFsdpCheckpointOpensInTheHfStack(@TempDir Path dir) throws Exception {
        Path work = Files.createDirectories(dir.resolve("work"));
        Path lora = recipe(dir, "lora", "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true");
        Path full = recipe(dir, "full", "");
        // the LoRA and the full fine-tune runs need nothing from each other
        CompletableFuture<PeftParityTest.Run> loraRun = Overlap.start(() -> fsdp(lora));
        CompletableFuture<PeftParityTest.Run> fullRun = Overlap.start(() -> fsdp(full, "max_steps=2",
                "learning_rate=1e-3"));
        Overlap.joinAll(loraRun, fullRun);
        PeftParityTest.Run train = loraRun.join();
        assertEquals(0, train.exit(), train.out() + train.err());
        PeftParityTest.Run fullTrain = fullRun.join();
        assertEquals(0, fullTrain.exit(), fullTrain.out() + fullTrain.err());
        Path run = dir.resolve("lora");
        // after the first optimizer step each rank's measured peak stands beside the plan's per-device estimate, and
        // the first step's metrics line carries them under the single-device run's names
        for (int rank = 0; rank < 2; rank++) {
            String prefix = "[rank " + rank + " ";
            String line = train.out().lines().filter(l -> l.startsWith(prefix) && l.contains("] memory after step 1: "
                    + "plan ")).findFirst().orElseThrow(() -> new AssertionError("no peak line:\n" + train.out()));
            assertTrue(line.matches(".*measured peak \\d+ MiB \\(resident set, VmHWM\\): the plan is \\d+\\.\\d % (above|below) it"), line);
            System.out.println("fsdp lora, 2 CPU ranks: " + line);
        }
        com.google.gson.JsonObject first = dev.finetune.trainers.train.output.MetricsLog.read(
                run.resolve("metrics.jsonl")).stream().filter(l -> l.get("step").getAsLong() == 1).findFirst()
                .orElseThrow();
        for (String key : List.of("plan_peak_memory_mb", "peak_memory_mb", "plan_peak_memory_error_pct")) {
            assertTrue(first.has(key) && Double.isFinite(first.get(key).getAsDouble()), key + " in " + first);
        }
        double planned = first.get("plan_peak_memory_mb").getAsDouble();
        double measured = first.get("peak_memory_mb").getAsDouble();
        assertEquals(100 * (planned / measured - 1), first.get("plan_peak_memory_error_pct").getAsDouble(), 1e-9);

        Path fullCheckpoint = dir.resolve("full").resolve("checkpoint-2");
        Path merged = work.resolve("merged");

        // every Hugging Face view of the three checkpoints from one Python process, while child JVMs generate from
        // each checkpoint and from the merge of the last one
        HfViews views = new HfViews();
        Map<Integer, Integer> peft = new HashMap<>();
        Map<Integer, Integer> states = new HashMap<>();
        Map<Integer, CompletableFuture<JsonArray>> ours = new HashMap<>();
        for (int step : new int[] {2, 4}) {
            Path checkpoint = run.resolve("checkpoint-" + step);
            ours.put(step, Overlap.start(() -> PeftParityTest.ourLogits(checkpoint)));
            peft.put(step, views.adapterLogits(checkpoint));
            states.put(step, views.trainerState(checkpoint));
        }
        CompletableFuture<JsonArray> fullOurs = Overlap.start(() -> PeftParityTest.ourLogits(fullCheckpoint));
        int fullLogits = views.modelLogits(fullCheckpoint);
        int fullState = views.trainerState(fullCheckpoint);
        CompletableFuture<JsonArray> fromMerged = Overlap.start(() -> {
            PeftParityTest.Run merge = PeftParityTest.finetune("merge-lora", run.resolve("checkpoint-4").toString(),
                    "--out", merged.toString());
            assertEquals(0, merge.exit(), merge.err());
            return PeftParityTest.ourLogits(merged);
        });
        CompletableFuture<Void> hf = Overlap.start(() -> {
            views.run(work);
            return null;
        });
        Overlap.joinAll(ours.get(2), ours.get(4), fullOurs, fromMerged, hf);

        for (int step : new int[] {2, 4}) {
            Path checkpoint = run.resolve("checkpoint-" + step);
            double gap = views.logitGap(peft.get(step), ours.get(step).join(), "checkpoint-" + step);
            System.out.printf("fsdp lora checkpoint-%d: PEFT loads it, max |logit - ours| %.2e%n", step, gap);
            assertTrue(gap < HfViews.LOGIT_BAR, "checkpoint-" + step + ": logits differ from PEFT's by " + gap);
            trainerState(views, states.get(step), step);
            assertTrue(Files.isRegularFile(checkpoint.resolve("tokenizer.json")));
        }
        // the last checkpoint holds the final weights
        assertEquals(Files.mismatch(run.resolve("checkpoint-4/adapter_model.safetensors"),
                run.resolve("adapter_model.safetensors")), -1L);
        JsonArray fromCheckpoint = ours.get(4).join();
        JsonArray mergedLogits = fromMerged.join();
        for (int i = 0; i < mergedLogits.size(); i++) {
            assertEquals(fromCheckpoint.get(i).getAsDouble(), mergedLogits.get(i).getAsDouble(), 1e-4, "logit " + i);
        }
        double fullGap = views.logitGap(fullLogits, fullOurs.join(), "full checkpoint-2");
        System.out.printf("fsdp full checkpoint-2: transformers loads it, max |logit - ours| %.2e%n", fullGap);
        assertTrue(fullGap < HfViews.LOGIT_BAR, "full checkpoint-2: logits differ from transformers' by " + fullGap);
        trainerState(views, fullState, 2);

        // a checkpoint whose bytes changed is refused before any rank starts, naming the file
        Path shard;
        try (var files = Files.list(run.resolve("checkpoint-2/dcp"))) {
            shard = files.filter(p -> p.getFileName().toString().endsWith(".distcp")).findFirst().orElseThrow();
        }
        try (RandomAccessFile file = new RandomAccessFile(shard.toFile(), "rw")) {
            file.seek(file.length() / 2);
            int b = file.read();
            file.seek(file.length() / 2);
            file.write(b ^ 0x55);
        }
        PeftParityTest.Run damaged = fsdp(lora, "resume_from_checkpoint=checkpoint-2");
        assertEquals(2, damaged.exit(), damaged.out() + damaged.err());
        assertTrue(damaged.err().contains("damaged checkpoint: dcp/" + shard.getFileName() + " does not match its "
                + "checksum"), damaged.err());
        assertFalse(damaged.out().contains("started, pid"), "no rank started:\n" + damaged.out());
    }
}
