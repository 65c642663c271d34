package dev.finetune.trainers.train.grpo;

import dev.finetune.recipes.ScaleRewards;

/**
 * Group-relative advantages as TRL computes them: each completion's reward minus the mean of its prompt's group,
 * divided ({@code scale_rewards}) by the group's standard deviation, the batch's, or nothing, plus 1e-4. Standard
 * deviations are unbiased, as {@code torch.std}. A group whose completions all earn the same reward gets
 * advantage exactly 0: nothing to learn from it.
 *
 * @param values one per completion, groups contiguous
 * @param rewardStd the standard deviation of the rewards over the batch: TRL's {@code reward_std}
 * @param zeroStdShare the share of completions whose scaling deviation (group or batch) is 0: TRL's
 *     {@code frac_reward_zero_std}
 */
public record Advantages(double[] values, double rewardStd, double zeroStdShare) {
    static final double STD_EPSILON = 1e-4;

    public static Advantages of(double[] rewards, int groupSize, ScaleRewards scale) {
        if (groupSize < 2 || rewards.length % groupSize != 0) {
            throw new IllegalArgumentException(rewards.length + " rewards do not split into groups of " + groupSize);
        }
        double[] advantages = new double[rewards.length];
        double batchStd = std(rewards, 0, rewards.length);
        int zeroStd = 0;
        for (int g = 0; g < rewards.length / groupSize; g++) {
            double mean = 0;
            for (int i = 0; i < groupSize; i++) {
                mean += rewards[g * groupSize + i];
            }
            mean /= groupSize;
            double std = scale == ScaleRewards.BATCH ? batchStd : std(rewards, g * groupSize, groupSize);
            zeroStd += Math.abs(std) <= 1e-8 ? groupSize : 0;
            for (int i = 0; i < groupSize; i++) {
                double centred = rewards[g * groupSize + i] - mean;
                advantages[g * groupSize + i] = scale == ScaleRewards.NONE ? centred : centred / (std + STD_EPSILON);
            }
        }
        return new Advantages(advantages, batchStd, (double) zeroStd / rewards.length);
    }

    /** Unbiased standard deviation of {@code n} values from {@code from}. */
    static double std(double[] values, int from, int n) {
        if (n < 2) {
            return 0;
        }
        double mean = 0;
        for (int i = from; i < from + n; i++) {
            mean += values[i];
        }
        mean /= n;
        double squares = 0;
        for (int i = from; i < from + n; i++) {
            squares += (values[i] - mean) * (values[i] - mean);
        }
        return Math.sqrt(squares / (n - 1));
    }
}
