package dev.finetune.trainers.train.sft;

import dev.finetune.trainers.train.Batch;

/**
 * A micro batch for supervised fine-tuning, row-major {@code [rows, columns]} arrays.
 *
 * <p>{@code labels} follow the Hugging Face convention: aligned with {@code inputIds} (the model predicts
 * {@code labels[t + 1]} from position {@code t}), {@code -100} where no loss is taken (prompt tokens, padding,
 * the first token of every packed example).
 *
 * @param segmentIds 0 for padding, 1, 2, … for the examples packed into a row
 */
public record SftBatch(
        int rows, int columns, long[] inputIds, long[] positionIds, long[] segmentIds, long[] labels)
        implements Batch {

    public static final long IGNORE = -100;

    public SftBatch {
        int cells = Math.multiplyExact(rows, columns);
        if (inputIds.length != cells || positionIds.length != cells || segmentIds.length != cells
                || labels.length != cells) {
            throw new IllegalArgumentException("every array of a " + rows + "x" + columns + " batch needs " + cells
                    + " entries");
        }
    }

    @Override
    public long tokenCount() {
        long tokens = 0;
        for (long segment : segmentIds) {
            if (segment != 0) {
                tokens++;
            }
        }
        return tokens;
    }

    @Override
    public long samples() {
        return rows;
    }

    /**
     * Each position's target, the label after it, and its weight: 1 where that label is trained on, else 0 with
     * target 0 (a valid index with exactly zero gradient). Row-major {@code [rows, columns]}, as every backend
     * reads it.
     */
    public record Targets(long[] ids, float[] weights) {}

    public Targets targets() {
        long[] ids = new long[rows * columns];
        float[] weights = new float[rows * columns];
        for (int r = 0; r < rows; r++) {
            for (int t = 0; t + 1 < columns; t++) {
                long next = labels[r * columns + t + 1];
                if (next != IGNORE) {
                    ids[r * columns + t] = next;
                    weights[r * columns + t] = 1f;
                }
            }
        }
        return new Targets(ids, weights);
    }

    /** Target tokens: positions {@code t} whose next label is trained on. */
    @Override
    public long lossWeight() {
        long targets = 0;
        for (int r = 0; r < rows; r++) {
            for (int t = 1; t < columns; t++) {
                if (labels[r * columns + t] != IGNORE) {
                    targets++;
                }
            }
        }
        return targets;
    }
}
