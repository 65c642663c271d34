package dev.finetune.trainers.data;

/**
 * One tokenized training example, before packing. {@code labels[t]} is {@code inputIds[t]} where that token is
 * learned and {@link #IGNORE} where it is not (Hugging Face's convention: not yet shifted).
 */
public record Example(int[] inputIds, int[] labels) {
    /** The label of a token that carries no loss, as in PyTorch's cross entropy. */
    public static final int IGNORE = -100;

    public Example {
        if (inputIds.length != labels.length) {
            throw new IllegalArgumentException("ids and labels differ in length: " + inputIds.length + " vs " + labels.length);
        }
    }

    public int length() {
        return inputIds.length;
    }

    /** Tokens the model is trained to predict: labelled tokens that have a token before them. */
    public int targets() {
        int count = 0;
        for (int t = 1; t < labels.length; t++) {
            if (labels[t] != IGNORE) {
                count++;
            }
        }
        return count;
    }

    Example truncated(int length) {
        return new Example(java.util.Arrays.copyOf(inputIds, length), java.util.Arrays.copyOf(labels, length));
    }
}
