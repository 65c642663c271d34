package dev.finetune.trainers.train;

import dev.finetune.trainers.train.sft.SftBatch;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * Synthetic SFT micro batches with the features real ones have: rows of different lengths padded at the end
 * (segment 0, label -100), a prompt part without loss, and a learnable rule (each token is the previous plus a
 * row-specific stride, modulo the vocabulary).
 */
final class ToyData {
    private ToyData() {}

    static List<SftBatch> batches(int count, int rows, int columns, int vocab, long seed) {
        Random random = new Random(seed);
        List<SftBatch> batches = new ArrayList<>();
        for (int b = 0; b < count; b++) {
            batches.add(batch(random, rows, columns, vocab));
        }
        return batches;
    }

    static SftBatch batch(Random random, int rows, int columns, int vocab) {
        int cells = rows * columns;
        long[] ids = new long[cells];
        long[] positions = new long[cells];
        long[] segments = new long[cells];
        long[] labels = new long[cells];
        for (int r = 0; r < rows; r++) {
            int length = 2 + random.nextInt(columns - 1);
            int prompt = 1 + random.nextInt(Math.max(1, length / 2));
            int stride = 1 + random.nextInt(3);
            long token = random.nextInt(vocab);
            for (int t = 0; t < columns; t++) {
                int i = r * columns + t;
                if (t < length) {
                    ids[i] = token;
                    positions[i] = t;
                    segments[i] = 1;
                    labels[i] = t < prompt ? SftBatch.IGNORE : token;
                    token = (token + stride) % vocab;
                } else {
                    labels[i] = SftBatch.IGNORE;
                }
            }
        }
        return new SftBatch(rows, columns, ids, positions, segments, labels);
    }

    /** The rows of {@code parts} stacked into one batch, each padded to the widest. */
    static SftBatch stack(List<SftBatch> parts) {
        int columns = parts.stream().mapToInt(SftBatch::columns).max().orElseThrow();
        int rows = parts.stream().mapToInt(SftBatch::rows).sum();
        long[] ids = new long[rows * columns];
        long[] positions = new long[rows * columns];
        long[] segments = new long[rows * columns];
        long[] labels = new long[rows * columns];
        java.util.Arrays.fill(labels, SftBatch.IGNORE);
        int row = 0;
        for (SftBatch part : parts) {
            for (int r = 0; r < part.rows(); r++, row++) {
                for (int t = 0; t < part.columns(); t++) {
                    int from = r * part.columns() + t;
                    int to = row * columns + t;
                    ids[to] = part.inputIds()[from];
                    positions[to] = part.positionIds()[from];
                    segments[to] = part.segmentIds()[from];
                    labels[to] = part.labels()[from];
                }
            }
        }
        return new SftBatch(rows, columns, ids, positions, segments, labels);
    }
}
