package dev.finetune.trainers.rewards;

import java.util.List;

/** Scores completions; one number per input, in order. Closing releases whatever it started (a process). */
public interface RewardFunction extends AutoCloseable {

    /** The name its mean is logged under, {@code rewards/<label>}. */
    String label();

    double[] score(List<RewardInput> inputs);

    @Override
    default void close() {}
}
