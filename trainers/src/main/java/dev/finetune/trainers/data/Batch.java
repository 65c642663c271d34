package dev.finetune.trainers.data;

/**
 * One micro batch as plain arrays, each {@code [rows][length]}; the training loop turns them into engine arrays.
 *
 * <p>{@code labels} are already shifted: {@code labels[b][t]} is the token the model must predict from position
 * {@code t} (the next token of the same example), or {@link Example#IGNORE}. So the loss is cross entropy of
 * {@code logits[b][t]} against {@code labels[b][t]} with no further shifting, and no position ever predicts
 * across an example boundary or into padding.
 *
 * @param inputIds token ids, padded with the tokenizer's pad id (else EOS, else 0)
 * @param labels next-token targets or -100
 * @param positionIds position within its own example, restarting at 0 for every packed example; 0 on padding
 * @param segmentIds 1, 2, … for the examples packed into a row, 0 on padding; attention stays within a segment
 * @param targetTokens labels that are not -100: the divisor of this batch's share of the loss
 * @param examples how many examples the batch holds
 */
public record Batch(long[][] inputIds, long[][] labels, long[][] positionIds, long[][] segmentIds, long targetTokens, int examples) {
    public int rows() {
        return inputIds.length;
    }

    public int length() {
        return inputIds.length == 0 ? 0 : inputIds[0].length;
    }
}
