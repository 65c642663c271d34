package dev.finetune.trainers.train.dpo;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.recipes.DpoLossType;
import dev.finetune.recipes.UserError;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The DPO loss over preference pairs from the summed completion log-probabilities of policy and reference, term
 * for term as TRL 1.13's {@code DPOTrainer} defines each {@code loss_type}, with TRL's metric names.
 *
 * <p>With {@code c = log π(c) − log π_ref(c)}, {@code r} likewise and {@code h = c − r}: {@code sigmoid} is
 * {@code −log σ(βh)}; {@code ipo} is {@code (c/|c| − r/|r| − 1/(2β))²} (lengths in tokens); the others are TRL's
 * formulas, see {@link DpoLossType}. Several terms add up with their weights ({@code dpo_loss_weights}), each a mean over
 * the pairs. {@code dpo_label_smoothing} only enters the losses TRL uses it in ({@code robust}, {@code exo_pair},
 * {@code aot}, {@code aot_unpaired}); TRL ignores it for {@code sigmoid}, and so do we. The implicit rewards are
 * {@code β·c} and {@code β·r}, and {@code logps/*} are sums, for every loss type.
 *
 * @param beta {@code rl_beta}/{@code trl.beta}: how hard the policy is held to the reference
 * @param discopopTau {@code discopop}'s temperature (TRL's {@code discopop_tau}, default 0.05)
 */
public record DpoLoss(List<Term> terms, double beta, double labelSmoothing, double discopopTau) {

    /** TRL's default {@code discopop_tau}. */
    public static final double DISCOPOP_TAU = 0.05;

    /** One loss of the sum and its weight ({@code dpo_loss_weights}, 1 when not given). */
    public record Term(DpoLossType type, double weight) {}

    public DpoLoss {
        terms = List.copyOf(terms);
        if (terms.isEmpty()) {
            throw new IllegalArgumentException("a DPO loss needs at least one term");
        }
        boolean dividesByBeta = terms.stream().anyMatch(t -> t.type().needsPositiveBeta());
        if (!(beta >= 0) || (dividesByBeta && beta == 0)) {
            throw new UserError("rl_beta", "beta must be " + (dividesByBeta ? "positive for ipo and sppo_hard"
                    : "0 or more") + ", got " + beta, "TRL's default is 0.1");
        }
        for (Term term : terms) {
            if (term.type() == DpoLossType.ROBUST && !(labelSmoothing < 0.5)) {
                throw new UserError("dpo_label_smoothing", "the robust loss needs dpo_label_smoothing below 0.5, got "
                        + labelSmoothing, "TRL divides by 1 − 2·ε");
            }
            if (term.type() == DpoLossType.EXO_PAIR && !(labelSmoothing > 0)) {
                throw new UserError("dpo_label_smoothing", "the exo_pair loss needs dpo_label_smoothing above 0",
                        "TRL suggests 1e-3");
            }
        }
    }

    /** One sigmoid (DPO) or other single loss with weight 1 and TRL's default {@code discopop_tau}. */
    public DpoLoss(DpoLossType type, double beta, double labelSmoothing) {
        this(List.of(new Term(type, 1)), beta, labelSmoothing, DISCOPOP_TAU);
    }

    /** The summed loss (differentiable through the policy arrays) and the batch means of TRL's metrics. */
    public record Result(NDArray sum, Map<String, Double> metrics) {}

    /**
     * @param policy {@code [2P]} differentiable summed log-probabilities: the chosen completions, then the rejected
     * @param reference {@code [2P]} the reference's, constants (no graph)
     * @param lengths the {@code 2P} completion lengths in tokens
     * @return the loss summed over the {@code P} pairs (the loop divides by the pairs of the window)
     */
    public Result compute(NDArray policy, NDArray reference, int[] lengths, NDManager manager) {
        int pairs = lengths.length / 2;
        NDIndex first = new NDIndex("0:" + pairs);
        NDIndex second = new NDIndex(pairs + ":");
        NDArray policyChosen = policy.get(first);
        NDArray policyRejected = policy.get(second);
        NDArray chosenRatio = policyChosen.sub(reference.get(first));
        NDArray rejectedRatio = policyRejected.sub(reference.get(second));
        Constants k = new Constants(manager);
        NDArray sum = null;
        for (Term term : terms) {
            NDArray perPair = perPair(term.type(), policyChosen, policyRejected, reference.get(first),
                    reference.get(second), chosenRatio, rejectedRatio, lengths, k);
            NDArray weighted = perPair.sum().mul(k.of(term.weight()));
            sum = sum == null ? weighted : sum.add(weighted);
        }
        return new Result(sum, metrics(chosenRatio.toFloatArray(), rejectedRatio.toFloatArray(),
                policyChosen.toFloatArray(), policyRejected.toFloatArray()));
    }

    /** {@code [P]}: one loss type per pair, as TRL's {@code _compute_loss} writes it. */
    private NDArray perPair(DpoLossType type, NDArray policyChosen, NDArray policyRejected, NDArray referenceChosen,
            NDArray referenceRejected, NDArray c, NDArray r, int[] lengths, Constants k) {
        NDArray h = c.sub(r);
        double eps = labelSmoothing;
        return switch (type) {
            case SIGMOID -> negLogSigmoid(h.mul(k.of(beta)));
            case HINGE -> k.of(1).sub(h.mul(k.of(beta))).maximum(k.of(0));
            case IPO -> {
                NDArray gap = perToken(c, lengths, 0, k).sub(perToken(r, lengths, c.size(), k))
                        .sub(k.of(1 / (2 * beta)));
                yield gap.mul(gap);
            }
            case SIGMOID_NORM -> negLogSigmoid(perToken(c, lengths, 0, k).sub(perToken(r, lengths, c.size(), k))
                    .mul(k.of(beta)));
            case EXO_PAIR -> {
                // KL(softmax over {chosen, rejected} of β·ratios ‖ [1 − ε, ε])
                NDArray x = h.mul(k.of(beta));
                NDArray logQw = negLogSigmoid(x).neg();
                NDArray logQl = negLogSigmoid(x.neg()).neg();
                yield logQw.exp().mul(logQw.sub(k.of(Math.log1p(-eps))))
                        .add(logQl.exp().mul(logQl.sub(k.of(Math.log(eps)))));
            }
            case NCA_PAIR -> {
                NDArray chosen = c.mul(k.of(beta));
                NDArray rejected = r.mul(k.of(beta));
                yield negLogSigmoid(chosen).add(negLogSigmoid(chosen.neg()).mul(k.of(0.5)))
                        .add(negLogSigmoid(rejected.neg()).mul(k.of(0.5)));
            }
            case ROBUST -> {
                NDArray x = h.mul(k.of(beta));
                yield negLogSigmoid(x).mul(k.of(1 - eps)).sub(negLogSigmoid(x.neg()).mul(k.of(eps)))
                        .mul(k.of(1 / (1 - 2 * eps)));
            }
            case BCO_PAIR -> negLogSigmoid(c.mul(k.of(beta))).add(negLogSigmoid(r.mul(k.of(beta)).neg()));
            case SPPO_HARD -> {
                NDArray winner = c.sub(k.of(0.5 / beta));
                NDArray loser = r.add(k.of(0.5 / beta));
                yield winner.mul(winner).add(loser.mul(loser));
            }
            // AOT sorts across the batch: it pairs quantiles, not rows
            case AOT -> smoothed(policyChosen.sub(policyRejected).sort(0)
                    .sub(referenceChosen.sub(referenceRejected).sort(0)).mul(k.of(beta)), k);
            case AOT_UNPAIRED -> smoothed(c.sort(0).sub(r.sort(0)).mul(k.of(beta)), k);
            case APO_ZERO -> k.of(1).sub(sigmoid(c.mul(k.of(beta)))).add(sigmoid(r.mul(k.of(beta))));
            case APO_DOWN -> sigmoid(c.mul(k.of(beta))).add(k.of(1).sub(sigmoid(h.mul(k.of(beta)))));
            case DISCOPOP -> {
                NDArray x = h.mul(k.of(beta));
                NDArray modulation = sigmoid(x.mul(k.of(1 / discopopTau)));
                yield negLogSigmoid(x).mul(k.of(1).sub(modulation)).add(x.neg().exp().mul(modulation));
            }
            case SFT -> {
                // TRL's cross-entropy over every chosen completion token of the batch, the same for each pair
                int pairs = (int) c.size();
                long tokens = 0;
                for (int i = 0; i < pairs; i++) {
                    tokens += lengths[i];
                }
                NDArray mean = policyChosen.sum().neg().mul(k.of(1.0 / Math.max(1, tokens)));
                yield mean.mul(k.ones(pairs));
            }
        };
    }

    /** TRL's label-smoothed logistic loss, as its {@code aot} variants write it. */
    private NDArray smoothed(NDArray x, Constants k) {
        return negLogSigmoid(x).mul(k.of(1 - labelSmoothing)).add(negLogSigmoid(x.neg()).mul(k.of(labelSmoothing)));
    }

    /** Summed log-ratios divided by the completion lengths (at least 1), rows {@code from..from+P}. */
    private static NDArray perToken(NDArray ratios, int[] lengths, long from, Constants k) {
        float[] inverse = new float[(int) ratios.size()];
        for (int i = 0; i < inverse.length; i++) {
            inverse[i] = 1f / Math.max(1, lengths[(int) from + i]);
        }
        return ratios.mul(k.manager.create(inverse));
    }

    /** −log σ(x) = softplus(−x). */
    private static NDArray negLogSigmoid(NDArray x) {
        return JniUtils.softPlus((PtNDArray) x.neg());
    }

    private static NDArray sigmoid(NDArray x) {
        return JniUtils.sigmoid((PtNDArray) x);
    }

    /** TRL's names; means over the pairs of this batch (the loop averages them over the window by pair count). */
    Map<String, Double> metrics(float[] chosenRatio, float[] rejectedRatio, float[] policyChosen,
            float[] policyRejected) {
        int pairs = chosenRatio.length;
        double chosen = 0;
        double rejected = 0;
        double accuracy = 0;
        double logpChosen = 0;
        double logpRejected = 0;
        for (int i = 0; i < pairs; i++) {
            // float products, as TRL forms them in float32 before comparing
            float c = (float) beta * chosenRatio[i];
            float r = (float) beta * rejectedRatio[i];
            chosen += c;
            rejected += r;
            accuracy += c > r ? 1 : 0;
            logpChosen += policyChosen[i];
            logpRejected += policyRejected[i];
        }
        Map<String, Double> metrics = new LinkedHashMap<>();
        metrics.put("rewards/chosen", chosen / pairs);
        metrics.put("rewards/rejected", rejected / pairs);
        metrics.put("rewards/accuracies", accuracy / pairs);
        metrics.put("rewards/margins", (chosen - rejected) / pairs);
        metrics.put("logps/chosen", logpChosen / pairs);
        metrics.put("logps/rejected", logpRejected / pairs);
        return metrics;
    }

    /** Torch-owned 0-dim constants, closed with the step: never a Java {@code Number} operand (docs/engine-facts.md). */
    private record Constants(NDManager manager) {
        NDArray of(double value) {
            return manager.full(new Shape(), (float) value, DataType.FLOAT32);
        }

        NDArray ones(int n) {
            return manager.ones(new Shape(n), DataType.FLOAT32);
        }
    }
}
