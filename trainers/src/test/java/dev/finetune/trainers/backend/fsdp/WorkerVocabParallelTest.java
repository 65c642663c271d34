package dev.finetune.trainers.backend.fsdp;

import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * A frozen table tied to the head kept in rows over the ranks (finetune_worker/vocab_parallel.py, what a LoRA run on
 * several ranks does instead of gathering the table in FSDP's root): {@code src/test/resources/worker/
 * test_vocab_parallel.py} starts 2 real CPU ranks under torchrun with uneven rows and uneven positions per rank; the
 * lookup equals the whole table's bitwise, the SFT loss and its input gradient equal {@code head_loss}'s over the
 * whole table, and the table gathered for the other heads is the table.
 */
class WorkerVocabParallelTest {

    @Test
    void theRowsOverTheRanksComputeWhatTheWholeTableDoes() throws Exception {
        WorkerKernelsTest.run("test_vocab_parallel", Map.of());
    }
}
