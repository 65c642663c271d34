package dev.finetune.trainers.backend;

import dev.finetune.trainers.data.TokenBatch;
import dev.finetune.trainers.train.sft.SftBatch;
import java.util.ArrayList;
import java.util.List;

/** The data pipeline's batches in the loop's flat layout; both already use Hugging Face's unshifted labels. */
final class SftBatches {
    private SftBatches() {}

    static List<SftBatch> of(List<TokenBatch> batches) {
        List<SftBatch> out = new ArrayList<>(batches.size());
        for (TokenBatch batch : batches) {
            out.add(new SftBatch(batch.rows(), batch.length(), TokenBatch.rowMajor(batch.inputIds()),
                    TokenBatch.rowMajor(batch.positionIds()), TokenBatch.rowMajor(batch.segmentIds()), TokenBatch.rowMajor(batch.labels())));
        }
        return out;
    }
}
