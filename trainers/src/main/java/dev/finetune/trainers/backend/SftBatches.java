package dev.finetune.trainers.backend;

import dev.finetune.trainers.data.Batch;
import dev.finetune.trainers.train.sft.SftBatch;
import java.util.ArrayList;
import java.util.List;

/** The data pipeline's batches in the loop's flat layout; both already use Hugging Face's unshifted labels. */
final class SftBatches {
    private SftBatches() {}

    static List<SftBatch> of(List<Batch> batches) {
        List<SftBatch> out = new ArrayList<>(batches.size());
        for (Batch batch : batches) {
            out.add(new SftBatch(batch.rows(), batch.length(), Batch.rowMajor(batch.inputIds()),
                    Batch.rowMajor(batch.positionIds()), Batch.rowMajor(batch.segmentIds()), Batch.rowMajor(batch.labels())));
        }
        return out;
    }
}
