package dev.finetune.trainers.rewards;

import dev.finetune.recipes.RewardSpec;
import dev.finetune.recipes.UserError;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The recipe's reward functions with their weights: a completion's reward is {@code Σ weight_i · reward_i}
 * ({@code trl.reward_weights}, each 1 when not given), as TRL sums them.
 */
public final class Rewards implements AutoCloseable {
    private final List<RewardFunction> functions;
    private final double[] weights;

    public Rewards(List<RewardFunction> functions, List<Double> weights) {
        if (!weights.isEmpty() && weights.size() != functions.size()) {
            throw new UserError("trl.reward_weights", weights.size() + " weights for " + functions.size()
                    + " reward functions", "give one weight per reward function");
        }
        this.functions = List.copyOf(functions);
        this.weights = functions.stream().mapToDouble(f -> 1.0).toArray();
        for (int i = 0; i < weights.size(); i++) {
            this.weights[i] = weights.get(i);
        }
    }

    /**
     * Builds every function, starting commands now (once per run).
     *
     * @param allowCommands the user passed {@code --allow-commands}; recipes are shared files, so a command in one
     *     is refused without it
     */
    public static Rewards start(List<RewardSpec> specs, List<Double> weights, boolean allowCommands) {
        if (specs.isEmpty()) {
            throw new UserError("trl.reward_funcs", "GRPO needs at least one reward function",
                    "add e.g. reward_funcs: [{name: contains, words: [dragon]}]");
        }
        requireAllowed(specs, allowCommands);
        List<RewardFunction> functions = new ArrayList<>();
        try {
            for (RewardSpec spec : specs) {
                functions.add(spec instanceof RewardSpec.Command c ? new CommandReward(c, Duration.ofSeconds(c.timeoutSeconds()))
                        : BuiltInReward.of(spec));
            }
        } catch (RuntimeException e) {
            functions.forEach(RewardFunction::close);
            throw e;
        }
        return new Rewards(functions, weights);
    }

    /** Refuses a command reward unless the user passed {@code --allow-commands}: recipes are shared files. */
    public static void requireAllowed(List<RewardSpec> specs, boolean allowCommands) {
        for (RewardSpec spec : specs) {
            if (spec instanceof RewardSpec.Command c && !allowCommands) {
                throw new UserError("trl.reward_funcs: " + c.label(), "the recipe runs the command '" + c.command()
                        + "'; recipes are shared, so finetune runs no command from one unless you allow it",
                        "read the command, and pass --allow-commands if you trust it");
            }
        }
    }

    /** Per completion: the weighted total, and every function's own score by label. */
    public record Scores(double[] total, Map<String, double[]> byFunction) {}

    public Scores score(List<RewardInput> inputs) {
        double[] total = new double[inputs.size()];
        Map<String, double[]> byFunction = new LinkedHashMap<>();
        for (int f = 0; f < functions.size(); f++) {
            double[] scores = functions.get(f).score(inputs);
            byFunction.put(functions.get(f).label(), scores);
            for (int i = 0; i < total.length; i++) {
                total[i] += weights[f] * scores[i];
            }
        }
        return new Scores(total, byFunction);
    }

    @Override
    public void close() {
        functions.forEach(RewardFunction::close);
    }
}
