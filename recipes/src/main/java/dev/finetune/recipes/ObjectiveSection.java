package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Sequence;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * What the loss is: {@code rl} with its {@code trl:} block, DPO keys and GRPO reward functions.
 */
final class ObjectiveSection {
    private final Problems problems;
    private final Path recipeDir;

    ObjectiveSection(Problems problems, Path recipeDir) {
        this.problems = problems;
        this.recipeDir = recipeDir;
    }

    Recipe.Objective objective(KeyReader top) {
        String rl = top.string("rl", null);
        Double rlBeta = top.number("rl_beta", null, 0, Double.MAX_VALUE);
        double labelSmoothing = top.number("dpo_label_smoothing", 0, 0.5);
        boolean precompute = top.bool("precompute_ref_log_probs");
        List<String> lossTypes = top.strings("dpo_loss_type", true);
        YamlNode lossWeights = top.node("dpo_loss_weights");
        Mapping trlMap = top.mapping("trl");
        KeyReader trl = new KeyReader(trlMap == null ? new Mapping(Map.of(), top.where()) : trlMap, "trl.", problems);
        Double trlBeta = trl.number("beta", null, 0, Double.MAX_VALUE);
        if (rlBeta != null && trlBeta != null && !rlBeta.equals(trlBeta)) {
            problems.error(trl.at("beta"), "trl.beta (" + YamlNumbers.fmt(trlBeta) + ") and rl_beta (" + YamlNumbers.fmt(rlBeta)
                    + ") disagree", "keep only one of them");
        }
        Double beta = rlBeta != null ? rlBeta : trlBeta;
        int numGenerations = trl.integer("num_generations", 2);
        Integer generationBatch = trl.integer("generation_batch_size", null, 1);
        Integer maxCompletion = trl.integer("max_completion_length", 1);
        Double temperature = trl.number("temperature", Double.MIN_VALUE, Double.MAX_VALUE);
        Double epsilon = trl.number("epsilon", 0, 1);
        YamlNode rewardNode = trl.node("reward_funcs");
        List<RewardSpec> rewardFuncs = rewardNode == null ? null : RewardSpecs.read(rewardNode, recipeDir, problems);
        YamlNode weightsNode = trl.node("reward_weights");
        ScaleRewards scaleRewards = scaleRewards(trl);
        GrpoLossType defaultLoss = GrpoLossType.of(trl.defaultText("loss_type"));
        String lossName = trl.string("loss_type");
        GrpoLossType grpoLoss = GrpoLossType.of(lossName);
        if (grpoLoss == null) {
            String close = Suggestions.closest(lossName, GrpoLossType.keys());
            problems.error(trl.at("loss_type"), "trl.loss_type '" + lossName + "' is not one finetune trains",
                    close != null ? "did you mean '" + close + "'?" : "use one of " + GrpoLossType.keys()
                            + " (TRL's sapo, cispo, vespo, luspo are not implemented)");
            grpoLoss = defaultLoss;
        }
        Double epsilonHigh = trl.number("epsilon_high", null, 0, Double.MAX_VALUE);
        Double delta = trl.number("delta", null, 1, Double.MAX_VALUE);
        Integer topK = trl.integer("top_k", 0);
        Double topP = trl.number("top_p", Double.MIN_VALUE, 1);
        double minP = trl.number("min_p", 0, 1);
        Double repetitionPenalty = trl.number("repetition_penalty", Double.MIN_VALUE, Double.MAX_VALUE);
        boolean maskTruncated = trl.bool("mask_truncated_completions");
        boolean biasCorrectedKl = trl.bool("use_bias_correction_kl");
        boolean useVllm = trl.bool("use_vllm");
        trl.finish();
        if (rl == null) {
            if (trlMap != null && !trlMap.entries().isEmpty()) {
                problems.warn(top.at("trl"), "trl: has no effect without rl", "add rl: dpo or rl: grpo, or remove trl:");
            }
            return new Recipe.Objective.Sft();
        }
        RlType type = RlType.of(rl);
        if (type == null) {
            String close = Suggestions.closest(rl, RlType.keys());
            problems.error(top.at("rl"), "rl is '" + rl + "', which is not an objective Axolotl knows",
                    close != null ? "did you mean '" + close + "'?" : "use rl: dpo or rl: grpo, or remove rl for SFT");
            return null;
        }
        if (!type.trained()) {
            problems.error(top.at("rl"), "rl: " + rl + " is unsupported: finetune trains sft, dpo and grpo",
                    "use rl: dpo (preference pairs) or rl: grpo (reward functions)");
            return null;
        }
        if (type == RlType.IPO) {
            problems.warn(top.at("rl"), "rl: ipo is deprecated in Axolotl", "write rl: dpo with dpo_loss_type: [ipo]");
            if (lossTypes == null) {
                lossTypes = List.of("ipo");
            }
            type = RlType.DPO;
        }
        if (type == RlType.DPO) {
            return dpo(top, lossTypes == null || lossTypes.isEmpty() ? top.defaultStrings("dpo_loss_type", "dpo") : lossTypes,
                    lossTypes != null, lossWeights, beta == null ? top.defaultNumber("rl_beta", "dpo") : beta,
                    rlBeta != null, labelSmoothing, precompute);
        }
        if (lossTypes != null) {
            problems.error(top.at("dpo_loss_type"), "dpo_loss_type only applies to rl: dpo", "remove it");
        }
        if (lossWeights != null) {
            problems.error(top.at("dpo_loss_weights"), "dpo_loss_weights only applies to rl: dpo", "remove it");
        }
        if (useVllm) {
            problems.error(trl.at("use_vllm"), "trl.use_vllm is unsupported: finetune generates GRPO completions in the trainer",
                    "remove trl.use_vllm");
        }
        // a written list whose entries were refused is reported already; a plugin may bring its own rewards
        boolean unwritten = rewardNode == null || rewardNode instanceof Sequence s && s.items().isEmpty();
        if (unwritten && !problems.pluginRefused) {
            problems.error(trlMap == null ? top.at("rl") : trl.at("reward_funcs"), "rl: grpo needs trl.reward_funcs",
                    "add e.g. 'trl: {reward_funcs: [exact_match]}'");
        }
        List<Double> weights = new ArrayList<>();
        if (weightsNode instanceof Sequence seq) {
            for (YamlNode w : seq.items()) {
                Double v = YamlNumbers.realNumber(w);
                if (v == null) {
                    problems.error(w.where(), "trl.reward_weights items must be numbers, got " + YamlNode.describe(w),
                            "write e.g. reward_weights: [1.0, 0.5]");
                } else {
                    weights.add(v);
                }
            }
            if (rewardFuncs != null && weights.size() != rewardFuncs.size() && weights.size() == seq.items().size()) {
                problems.error(weightsNode.where(), "trl.reward_weights has " + weights.size() + " weights for "
                        + rewardFuncs.size() + " reward functions", "give one weight per reward function");
            }
        } else if (weightsNode != null) {
            problems.error(weightsNode.where(), "trl.reward_weights must be a list, got " + YamlNode.describe(weightsNode),
                    "write e.g. reward_weights: [1.0]");
        }
        return new Recipe.Objective.Grpo(numGenerations, generationBatch, maxCompletion, temperature,
                beta == null ? top.defaultNumber("rl_beta", "grpo") : beta, epsilon,
                rewardFuncs == null ? List.of() : rewardFuncs, List.copyOf(weights), scaleRewards, useVllm, grpoLoss,
                epsilonHigh == null ? epsilon : epsilonHigh, delta,
                new Recipe.Objective.Sampling(topK, topP, minP, repetitionPenalty), maskTruncated, biasCorrectedKl);
    }

    /** {@code trl.scale_rewards}: group, batch or none, or a boolean as TRL reads one (true = group). */
    private ScaleRewards scaleRewards(KeyReader trl) {
        YamlNode node = trl.node("scale_rewards");
        if (node == null) {
            return ScaleRewards.of(trl.defaultText("scale_rewards"));
        }
        if (node instanceof YamlNode.Scalar scalar) {
            String text = String.valueOf(scalar.value()).toLowerCase(java.util.Locale.ROOT);
            if (text.equals("true")) {
                return ScaleRewards.GROUP;
            }
            if (text.equals("false")) {
                return ScaleRewards.NONE;
            }
            ScaleRewards named = ScaleRewards.of(text);
            if (named != null) {
                return named;
            }
        }
        problems.error(node.where(), "trl.scale_rewards must be group, batch, none, true or false, got "
                + YamlNode.describe(node), "TRL's default is group (true)");
        return ScaleRewards.GROUP;
    }

    /**
     * The DPO loss as TRL sums it: {@code dpo_loss_type} names TRL's loss types, {@code dpo_loss_weights} weighs
     * them (one weight each), and the parameters each type needs are checked as TRL checks them.
     */
    private Recipe.Objective.Dpo dpo(KeyReader top, List<String> names, boolean namesWritten, YamlNode weightsNode,
            double beta, boolean betaFromRlBeta, double labelSmoothing, boolean precompute) {
        List<DpoLossType> types = new ArrayList<>();
        for (String name : names) {
            DpoLossType type = DpoLossType.of(name);
            if (type == null) {
                String close = Suggestions.closest(name, DpoLossType.keys());
                problems.error(top.at("dpo_loss_type"), "dpo_loss_type '" + name + "' is not a DPO loss TRL defines",
                        close != null ? "did you mean '" + close + "'?" : "use one of " + DpoLossType.keys());
            } else {
                types.add(type);
            }
        }
        List<Double> weights = new ArrayList<>();
        if (weightsNode instanceof Sequence seq) {
            for (YamlNode w : seq.items()) {
                Double v = YamlNumbers.realNumber(w);
                if (v == null) {
                    problems.error(w.where(), "dpo_loss_weights items must be numbers, got " + YamlNode.describe(w),
                            "write e.g. dpo_loss_weights: [1.0, 0.5]");
                }
                weights.add(v == null ? 1.0 : v);
            }
            if (!namesWritten || weights.size() != names.size()) {
                problems.error(weightsNode.where(), "dpo_loss_weights has " + weights.size() + " weights for "
                        + names.size() + " dpo_loss_type entries",
                        "give one weight per loss type, e.g. dpo_loss_type: [sigmoid, sft] with dpo_loss_weights: [1.0, 0.5]");
            }
        } else if (weightsNode != null) {
            problems.error(weightsNode.where(), "dpo_loss_weights must be a list, got " + YamlNode.describe(weightsNode),
                    "write e.g. dpo_loss_weights: [1.0, 0.5]");
        }
        if (types.isEmpty()) {
            return null;
        }
        if (weights.size() != types.size()) {
            weights = new ArrayList<>(java.util.Collections.nCopies(types.size(), 1.0));
        }
        for (DpoLossType type : types) {
            if (type.needsPositiveBeta() && beta == 0) {
                problems.error(top.at(betaFromRlBeta ? "rl_beta" : "trl"), "the " + type.key() + " loss needs beta > 0 "
                        + "(it divides by beta)", "use e.g. rl_beta: 0.1");
            }
            if (type == DpoLossType.ROBUST && !(labelSmoothing < 0.5)) {
                problems.error(top.at("dpo_label_smoothing"), "the robust loss needs dpo_label_smoothing below 0.5",
                        "TRL divides by 1 - 2 * dpo_label_smoothing; use e.g. 0.1");
            }
            if (type == DpoLossType.EXO_PAIR && labelSmoothing == 0) {
                problems.error(top.at("dpo_loss_type"), "the exo_pair loss needs dpo_label_smoothing above 0",
                        "set dpo_label_smoothing: 0.001 (TRL's suggestion)");
            }
        }
        if (labelSmoothing > 0 && types.stream().noneMatch(DpoLossType::usesLabelSmoothing)) {
            problems.warn(top.at("dpo_label_smoothing"), "dpo_label_smoothing has no effect on " + types.stream()
                    .map(DpoLossType::key).toList() + " (TRL applies it only to robust, exo_pair, aot, aot_unpaired)",
                    "remove it, or use dpo_loss_type: [robust] for label-noise-robust DPO");
        }
        return new Recipe.Objective.Dpo(beta, labelSmoothing, precompute, types, weights);
    }
}
