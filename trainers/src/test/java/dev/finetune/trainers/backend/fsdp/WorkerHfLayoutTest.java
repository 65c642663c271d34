package dev.finetune.trainers.backend.fsdp;

import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The worker's weights in Hugging Face's layout, written by every rank at once without gathering
 * (finetune_worker/hf_layout.py): {@code src/test/resources/worker/test_hf_layout.py} starts 2 real CPU ranks under
 * torchrun, writes a sharded random Qwen2 (bf16) into size-bounded files with their index and a LoRA adapter, and
 * loads them with transformers' and PEFT's {@code from_pretrained}: bitwise the model's tensors; each file created
 * and hashed by one rank, with its real SHA-256.
 */
class WorkerHfLayoutTest {

    @Test
    void everyRankWritesItsRowsIntoFilesTransformersAndPeftLoad() throws Exception {
        WorkerKernelsTest.run("test_hf_layout", Map.of());
    }
}
