package dev.finetune.trainers.train.grpo;

import dev.finetune.trainers.data.GrpoPrompt;
import dev.finetune.trainers.rewards.RewardInput;
import dev.finetune.trainers.rewards.Rewards;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * What a micro batch's sampled completions earn, before any forward pass: the rewards, the group-relative
 * advantages, which completions were cut without EOS, and TRL's reward and completion metrics. Both backends score
 * through here (the JVM objective directly, the fsdp workers through the reward channel), so the rewards and the
 * advantages have one implementation.
 *
 * @param advantages one per completion, in the batch's order (each prompt's group contiguous)
 * @param truncated completions that end without EOS (cut at {@code max_completion_length}), or are empty
 * @param metrics {@code reward}, {@code reward_std}, {@code frac_reward_zero_std}, {@code rewards/<f>/mean|std},
 *     {@code completions/*}: each a mean over the batch's completions
 */
public record RolloutScores(double[] advantages, boolean[] truncated, Map<String, Double> metrics) {

    /** @param completions one per completion: prompt p's i-th at {@code p * numGenerations + i} */
    public static RolloutScores of(GrpoBatch batch, List<long[]> completions, Rewards rewards,
            Function<long[], String> decode, GrpoObjective.Settings settings) {
        int groupSize = batch.numGenerations();
        if (completions.size() != batch.prompts().size() * groupSize) {
            throw new IllegalArgumentException(completions.size() + " completions for " + batch.prompts().size()
                    + " prompts x " + groupSize);
        }
        List<RewardInput> inputs = new ArrayList<>(completions.size());
        for (int i = 0; i < completions.size(); i++) {
            GrpoPrompt prompt = batch.prompts().get(i / groupSize);
            inputs.add(new RewardInput(prompt.text(), decode.apply(completions.get(i)), prompt.fields()));
        }
        Rewards.Scores scores = rewards.score(inputs);
        Advantages advantages = Advantages.of(scores.total(), groupSize, settings.scaleRewards());
        boolean[] truncated = new boolean[completions.size()];
        int[] lengths = new int[completions.size()];
        for (int i = 0; i < truncated.length; i++) {
            long[] c = completions.get(i);
            lengths[i] = c.length;
            truncated[i] = c.length == 0
                    || !(settings.eosIds().contains(c[c.length - 1]) || c[c.length - 1] == settings.padId());
        }
        Map<String, Double> metrics = new LinkedHashMap<>();
        metrics.put("reward", mean(scores.total()));
        metrics.put("reward_std", advantages.rewardStd());
        metrics.put("frac_reward_zero_std", advantages.zeroStdShare());
        scores.byFunction().forEach((label, values) -> {
            metrics.put("rewards/" + label + "/mean", mean(values));
            metrics.put("rewards/" + label + "/std", Advantages.std(values, 0, values.length));
        });
        metrics.putAll(GrpoObjective.completionMetrics(lengths, truncated));
        return new RolloutScores(advantages.values(), truncated, metrics);
    }

    private static double mean(double[] values) {
        double sum = 0;
        for (double v : values) {
            sum += v;
        }
        return values.length == 0 ? 0 : sum / values.length;
    }
}
