package dev.finetune.trainers.train;

/**
 * Derives independent seeds from the recipe's {@code seed} and a position in the run.
 *
 * <p>DJL cannot read or restore the engine generator's state, so instead of saving it we reseed it from
 * (seed, step, micro batch, layer) wherever randomness is drawn: a resumed run then draws exactly what the
 * uninterrupted run drew.
 */
final class Seeds {
    private Seeds() {}

    /** A well-mixed non-negative int from {@code base} and {@code salt} (SplitMix64 finaliser). */
    static int derive(long base, long salt) {
        long z = base + 0x9E3779B97F4A7C15L * (salt + 1);
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        z = z ^ (z >>> 31);
        return (int) (z >>> 33);
    }

    /** The seed of micro batch {@code micro} of optimizer step {@code step}. */
    static long microStep(long seed, long step, int micro) {
        return derive(derive(seed, step), micro);
    }
}
