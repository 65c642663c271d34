package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.SchedulePlan;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.output.MetricsLog;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * torchrun prints a rank's stdout and stderr under the same {@code [defaultN]:} header. When its stdout tail thread
 * reads a line the rank is still writing, it prints the first half, and the rank's stderr thread can print a
 * warning before the rest: read as one stream, that warning lands inside the half line and the event is lost (a
 * CI run once lost its {@code start} event this way and failed with "step 0 reported before the run's start").
 * Played here by a real process that prints exactly that sequence.
 */
class TorchrunStreamsTest {

    private static final String START = "{\"event\": \"start\", \"rank\": 0, \"host\": \"h\", \"step\": 0, "
            + "\"total_steps\": 1, \"world_size\": 2, \"parameters\": 100, \"trainable_parameters\": 10, "
            + "\"device\": \"cpu\", \"micro_batches_per_step\": 2, \"flos_parameters\": 90}";

    @Test
    void aWarningPrintedInsideAHalfWrittenEventDoesNotLoseIt(@TempDir Path tmp) throws IOException {
        ValidatedRecipe recipe = FsdpRuns.recipe(tmp, "cpu", """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                output_dir: %s
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_target_linear: true
                sequence_len: 64
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                max_steps: 1
                learning_rate: 1e-4
                backend: fsdp
                """.formatted(WorkerEnvironment.stories260K(), WorkerEnvironment.data("quickstart.jsonl"),
                tmp.resolve("out")));
        Path out = tmp.resolve("out");
        Files.createDirectories(out);
        Trainer.Run schedule = Trainer.Run.of(recipe.recipe(), SchedulePlan.of(recipe.recipe(), 2, 2, false), "data", "model");
        int half = START.length() / 2;
        String script = String.join("\n",
                "import sys, time",
                "def say(stream, text):",
                "    stream.write(text); stream.flush(); time.sleep(0.2)",
                "say(sys.stdout, '[default0]:' + sys.argv[1])",
                "say(sys.stderr, '[default0]:UserWarning: a warning of rank 0\\n')",
                "say(sys.stdout, '[default0]:' + sys.argv[2] + '\\n')",
                "say(sys.stdout, '[default0]:{\"event\": \"metrics\", \"metrics\": {\"step\": 0, \"epoch\": 0.0, "
                        + "\"eval_loss\": 2.5}}\\n')",
                "say(sys.stdout, '[default0]:{\"event\": \"metrics\", \"samples\": 2, \"metrics\": {\"step\": 1, "
                        + "\"epoch\": 1.0, \"loss\": 2.4, \"learning_rate\": 1e-4, \"grad_norm\": 0.5, "
                        + "\"num_tokens\": 128, \"eval_loss\": 2.3}}\\n')",
                "say(sys.stdout, '[default0]:{\"event\": \"done\"}\\n')");
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        Launch launch = Launch.local(FsdpRuns.onRanks(recipe, 2).run(), "python3");
        FsdpBackend.Result result = Torchrun.run(
                List.of("python3", "-c", script, START.substring(0, half), START.substring(half)), Map.of(), out,
                launch, new FsdpBackend.Settings(launch, null, FsdpRuns.writer(log)), schedule);
        String printed = log.toString(StandardCharsets.UTF_8);
        assertEquals(1, result.steps(), printed);
        assertEquals(2.5, result.firstEvalLoss(), printed);
        List<String> lines = Files.readAllLines(out.resolve(MetricsLog.FILE));
        assertTrue(lines.stream().anyMatch(l -> l.contains("\"step\":0") && l.contains("eval_loss")), lines::toString);
        assertTrue(lines.stream().anyMatch(l -> l.contains("\"step\":1") && l.contains("\"loss\"")), lines::toString);
        assertTrue(printed.contains("[rank 0 " ) && printed.contains("UserWarning: a warning of rank 0"), printed);
        assertTrue(printed.contains("model: 100 parameters, 10 trainable, on cpu; 1 steps"), printed);
    }
}
