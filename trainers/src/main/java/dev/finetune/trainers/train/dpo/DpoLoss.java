package dev.finetune.trainers.train.dpo;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.recipes.UserError;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The DPO loss over preference pairs from the sequence log-probabilities of policy and reference, as TRL defines
 * it, with TRL's metric names.
 *
 * <p>With {@code h = (log π(c) − log π_ref(c)) − (log π(r) − log π_ref(r))} per pair: {@code sigmoid} is
 * {@code −(1−ε)·log σ(βh) − ε·log σ(−βh)} (ε = {@code dpo_label_smoothing}), {@code ipo} is
 * {@code (h − 1/(2β))²} on per-token mean log-probabilities. The implicit rewards are {@code β·(log π − log π_ref)}.
 *
 * @param beta {@code rl_beta}/{@code trl.beta}: how hard the policy is held to the reference
 */
public record DpoLoss(Type type, double beta, double labelSmoothing) {

    /** {@code dpo_loss_type}. */
    public enum Type {
        SIGMOID, IPO;

        public static Type parse(String name) {
            return switch (name == null ? "sigmoid" : name) {
                case "sigmoid" -> SIGMOID;
                case "ipo" -> IPO;
                default -> throw new UserError("dpo_loss_type", "the DPO loss '" + name + "' is not implemented",
                        "use sigmoid (DPO) or ipo");
            };
        }

        /** IPO compares per-token means, so long answers do not win by length alone (TRL does the same). */
        public boolean perTokenMean() {
            return this == IPO;
        }
    }

    public DpoLoss {
        if (!(beta >= 0) || (type == Type.IPO && beta == 0)) {
            throw new UserError("rl_beta", "beta must be " + (type == Type.IPO ? "positive for ipo" : "0 or more")
                    + ", got " + beta, "TRL's default is 0.1");
        }
    }

    /** The summed loss (differentiable through the policy arrays) and the batch means of TRL's metrics. */
    public record Result(NDArray sum, Map<String, Double> metrics) {}

    /**
     * @param policyChosen {@code [P]} differentiable sequence log-probabilities of the chosen completions
     * @param referenceChosen {@code [P]} constants (no graph)
     */
    public Result compute(NDArray policyChosen, NDArray policyRejected, NDArray referenceChosen,
            NDArray referenceRejected, NDManager manager) {
        NDArray chosenRatio = policyChosen.sub(referenceChosen);
        NDArray rejectedRatio = policyRejected.sub(referenceRejected);
        NDArray h = chosenRatio.sub(rejectedRatio);
        NDArray perPair;
        if (type == Type.SIGMOID) {
            NDArray scaled = h.mul(constant(manager, beta));
            // −log σ(x) = softplus(−x)
            NDArray agree = JniUtils.softPlus((PtNDArray) scaled.neg());
            perPair = labelSmoothing == 0 ? agree
                    : agree.mul(constant(manager, 1 - labelSmoothing))
                            .add(JniUtils.softPlus((PtNDArray) scaled).mul(constant(manager, labelSmoothing)));
        } else {
            NDArray gap = h.sub(constant(manager, 1 / (2 * beta)));
            perPair = gap.mul(gap);
        }
        return new Result(perPair.sum(), metrics(chosenRatio.toFloatArray(), rejectedRatio.toFloatArray(),
                policyChosen.toFloatArray(), policyRejected.toFloatArray()));
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
            double c = beta * chosenRatio[i];
            double r = beta * rejectedRatio[i];
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

    /** A torch-owned 0-dim constant, closed with the step: never a Java {@code Number} operand (DESIGN.md §5). */
    private static NDArray constant(NDManager manager, double value) {
        return manager.full(new Shape(), (float) value, DataType.FLOAT32);
    }
}
