package dev.finetune.trainers.train.grpo;

/**
 * Group-relative advantages: each completion's reward minus the mean of its prompt's group, divided by the group's
 * standard deviation (unbiased, as {@code torch.std}) plus 1e-4 when {@code scale_rewards} is on, as TRL does.
 * A group whose completions all earn the same reward gets advantage exactly 0: nothing to learn from it.
 *
 * @param values one per completion, groups contiguous
 * @param meanGroupStd the mean over groups of the reward standard deviation: TRL's {@code reward_std}
 */
public record Advantages(double[] values, double meanGroupStd) {
    static final double STD_EPSILON = 1e-4;

    public static Advantages of(double[] rewards, int groupSize, boolean scale) {
        if (groupSize < 2 || rewards.length % groupSize != 0) {
            throw new IllegalArgumentException(rewards.length + " rewards do not split into groups of " + groupSize);
        }
        double[] advantages = new double[rewards.length];
        double stdSum = 0;
        int groups = rewards.length / groupSize;
        for (int g = 0; g < groups; g++) {
            double mean = 0;
            for (int i = 0; i < groupSize; i++) {
                mean += rewards[g * groupSize + i];
            }
            mean /= groupSize;
            double squares = 0;
            for (int i = 0; i < groupSize; i++) {
                double d = rewards[g * groupSize + i] - mean;
                squares += d * d;
            }
            double std = Math.sqrt(squares / (groupSize - 1));
            stdSum += std;
            for (int i = 0; i < groupSize; i++) {
                double centred = rewards[g * groupSize + i] - mean;
                advantages[g * groupSize + i] = scale ? centred / (std + STD_EPSILON) : centred;
            }
        }
        return new Advantages(advantages, stdSum / groups);
    }
}
