package dev.finetune.trainers.backend;

import dev.finetune.trainers.data.Batch;
import dev.finetune.trainers.data.Example;
import dev.finetune.trainers.train.sft.SftBatch;
import java.util.ArrayList;
import java.util.List;

/**
 * The data pipeline's batches in the loop's form. The pipeline stores labels already shifted (the target of
 * position {@code t}); {@link SftBatch} follows Hugging Face and shifts itself, so the labels move one place right
 * within each row. Position 0 gets no label, which also gives every packed example's first token none.
 */
final class SftBatches {
    private SftBatches() {}

    static List<SftBatch> of(List<Batch> batches) {
        List<SftBatch> out = new ArrayList<>(batches.size());
        for (Batch batch : batches) {
            out.add(of(batch));
        }
        return out;
    }

    static SftBatch of(Batch batch) {
        int rows = batch.rows();
        int columns = batch.length();
        long[] ids = new long[rows * columns];
        long[] positions = new long[rows * columns];
        long[] segments = new long[rows * columns];
        long[] labels = new long[rows * columns];
        for (int r = 0; r < rows; r++) {
            int base = r * columns;
            System.arraycopy(batch.inputIds()[r], 0, ids, base, columns);
            System.arraycopy(batch.positionIds()[r], 0, positions, base, columns);
            System.arraycopy(batch.segmentIds()[r], 0, segments, base, columns);
            labels[base] = Example.IGNORE;
            System.arraycopy(batch.labels()[r], 0, labels, base + 1, columns - 1);
        }
        return new SftBatch(rows, columns, ids, positions, segments, labels);
    }
}
