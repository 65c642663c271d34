package dev.finetune.trainers.data;

/**
 * One micro batch as plain arrays, each {@code [rows][length]}; the training loop turns them into engine arrays
 * ({@link #rowMajor} gives the flat layout {@code SftBatch} takes).
 *
 * <p>{@code labels} follow the Hugging Face convention, like {@code SftBatch}: aligned with {@code inputIds}, the
 * model predicting {@code labels[b][t + 1]} from position {@code t}; {@link Example#IGNORE} where no loss is
 * taken. The first token of every example is IGNORE too, so after the shift no position predicts across a packed
 * example boundary, and padding is IGNORE throughout.
 *
 * @param inputIds token ids, padded with the tokenizer's pad id (else EOS, else 0)
 * @param labels the learned token ids, or -100
 * @param positionIds position within its own example, restarting at 0 for every packed example; 0 on padding
 * @param segmentIds 1, 2, … for the examples packed into a row, 0 on padding; attention stays within a segment
 * @param targetTokens labels that are not -100: the divisor of this batch's share of the loss
 * @param examples how many examples the batch holds
 */
public record TokenBatch(long[][] inputIds, long[][] labels, long[][] positionIds, long[][] segmentIds, long targetTokens, int examples) {
    public int rows() {
        return inputIds.length;
    }

    public int length() {
        return inputIds.length == 0 ? 0 : inputIds[0].length;
    }

    /** The rows one after another, the layout {@code SftBatch} and engine arrays of shape [rows, length] use. */
    public static long[] rowMajor(long[][] rows) {
        int length = rows.length == 0 ? 0 : rows[0].length;
        long[] flat = new long[Math.multiplyExact(rows.length, length)];
        for (int r = 0; r < rows.length; r++) {
            System.arraycopy(rows[r], 0, flat, r * length, length);
        }
        return flat;
    }
}
