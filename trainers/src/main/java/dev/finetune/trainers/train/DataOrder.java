package dev.finetune.trainers.train;

import java.util.SplittableRandom;

/**
 * Which micro batch comes at each data position: the positions run on across epochs, and every epoch visits all
 * micro batches once in an order drawn from ({@code seed}, epoch), or in their own order under curriculum sampling.
 * The order is a pure function of the position, so a resumed run needs only the position to continue the same
 * sequence.
 */
public final class DataOrder {
    private final int size;
    private final long seed;
    private final boolean shuffled;
    private long cachedEpoch = -1;
    private int[] permutation;

    public DataOrder(int size, long seed) {
        this(size, seed, true);
    }

    /** @param shuffled false for {@code curriculum_sampling}: every epoch visits the micro batches in order */
    public DataOrder(int size, long seed, boolean shuffled) {
        if (size < 1) {
            throw new IllegalArgumentException("the training data has no micro batch");
        }
        this.size = size;
        this.seed = seed;
        this.shuffled = shuffled;
    }

    /** The index of the micro batch at data position {@code position} (0-based, counted across epochs). */
    public int at(long position) {
        if (!shuffled) {
            return (int) (position % size);
        }
        long epoch = position / size;
        if (epoch != cachedEpoch) {
            permutation = permutation(epoch);
            cachedEpoch = epoch;
        }
        return permutation[(int) (position % size)];
    }

    private int[] permutation(long epoch) {
        int[] order = new int[size];
        for (int i = 0; i < size; i++) {
            order[i] = i;
        }
        SplittableRandom random = new SplittableRandom(Seeds.derive(seed, epoch));
        for (int i = size - 1; i > 0; i--) {
            int j = random.nextInt(i + 1);
            int swap = order[i];
            order[i] = order[j];
            order[j] = swap;
        }
        return order;
    }
}
