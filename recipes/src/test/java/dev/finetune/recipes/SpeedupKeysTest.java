package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** torch_compile*, liger_* and activation_offloading read once into {@link Recipe.Speedups}. */
class SpeedupKeysTest {

    static Recipe read(Path dir, String keys) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}\n");
        Path file = dir.resolve("r.yaml");
        Files.writeString(file, """
                base_model: meta-llama/Llama-3.1-8B
                datasets:
                  - path: d.jsonl
                    type: alpaca
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                sequence_len: 128
                learning_rate: 0.0002
                """ + keys);
        return ValidatedRecipe.load(file, List.of()).recipe();
    }

    @Test
    void axolotlsSpeedKeysBecomeTheWorkersSettings(@TempDir Path dir) throws IOException {
        Recipe.Speedups s = read(dir, """
                torch_compile: auto
                torch_compile_backend: inductor
                torch_compile_mode: max-autotune-no-cudagraphs
                liger_rms_norm: true
                liger_glu_activation: true
                liger_swiglu: true
                liger_rope: false
                liger_fused_linear_cross_entropy: true
                gradient_checkpointing: true
                activation_offloading: legacy
                """).speedups();
        assertEquals(Recipe.Flag.AUTO, s.torchCompile());
        assertTrue(s.compiles(true));
        assertFalse(s.compiles(false));
        assertEquals("inductor", s.compileBackend());
        assertEquals("max-autotune-no-cudagraphs", s.compileMode());
        // glu_activation and swiglu are one kernel; rope was switched off
        assertEquals(List.of("rms_norm", "swiglu"), s.liger());
        assertTrue(s.activationOffloading());
    }

    @Test
    void nothingWrittenMeansThePlainPath(@TempDir Path dir) throws IOException {
        assertEquals(Recipe.Speedups.NONE, read(dir, "").speedups());
    }
}
