package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.trainers.parity.PythonStack;
import java.io.IOException;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Hugging Face Trainer continues a checkpoint of the fsdp worker: {@code Trainer.train(resume_from_checkpoint=...)}
 * runs one more step and saves its own checkpoint, which failed with {@code KeyError: 'TrainerControl'} while our
 * {@code trainer_state.json} had empty {@code stateful_callbacks}.
 */
class FsdpHfInteropTest {

    @Test
    void theHfTrainerContinuesAWorkerCheckpoint(@TempDir Path tmp) throws IOException {
        WorkerEnvironment.python();
        Path out = tmp.resolve("run");
        String yaml = """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                val_set_size: 0
                output_dir: %s
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_dropout: 0.0
                lora_target_linear: true
                sequence_len: 128
                sample_packing: true
                micro_batch_size: 2
                gradient_accumulation_steps: 1
                max_steps: 4
                learning_rate: 1e-3
                save_steps: 2
                seed: 7
                hardware: cpu
                """.formatted(WorkerEnvironment.stories260K(), WorkerEnvironment.data("quickstart.jsonl"), out);
        FsdpRuns.fsdp(FsdpRuns.recipe(tmp, "run", yaml, "backend=fsdp"), 1);
        String printed = PythonStack.runScript(PythonStack.script("/fsdp/hf_trainer_resume.py", tmp), tmp,
                WorkerEnvironment.stories260K().toString(), out.resolve("checkpoint-2").toString(),
                tmp.resolve("hf").toString());
        JsonObject hf = JsonParser.parseString(printed.strip().lines().reduce((a, b) -> b).orElseThrow())
                .getAsJsonObject();
        System.out.println("HF Trainer on the worker's checkpoint-2: " + hf);
        assertEquals(2, hf.get("resumed_at").getAsInt());
        assertEquals(3, hf.get("saved_step").getAsInt());
        assertEquals("[\"TrainerControl\"]", hf.get("stateful_callbacks").toString());
    }
}
