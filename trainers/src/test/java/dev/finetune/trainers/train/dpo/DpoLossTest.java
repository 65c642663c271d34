package dev.finetune.trainers.train.dpo;

import dev.finetune.recipes.DpoLossType;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.training.GradientCollector;
import dev.finetune.recipes.UserError;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The DPO loss and TRL's metrics against values worked out by hand from the definitions. */
class DpoLossTest {
    // two pairs: h = (0.5 - (-0.5)) = 1 for the first, (-1 - 1) = -2 for the second
    private static final float[] POLICY_CHOSEN = {-3f, -5f};
    private static final float[] POLICY_REJECTED = {-4f, -2f};
    private static final float[] REFERENCE_CHOSEN = {-3.5f, -4f};
    private static final float[] REFERENCE_REJECTED = {-3.5f, -3f};

    private record Run(double loss, Map<String, Double> metrics, float[] chosenGradient) {}

    private static Run run(DpoLoss loss) {
        try (NDManager manager = NDManager.newBaseManager()) {
            NDArray policy = manager.create(join(POLICY_CHOSEN, POLICY_REJECTED)).duplicate();
            policy.setRequiresGradient(true);
            DpoLoss.Result result;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                result = loss.compute(policy, manager.create(join(REFERENCE_CHOSEN, REFERENCE_REJECTED)),
                        new int[] {2, 4, 1, 5}, manager);
                System.gc(); // constants freed under autograd would show up as wrong gradients
                collector.backward(result.sum());
            }
            float[] gradient = policy.getGradient().toFloatArray();
            return new Run(result.sum().getFloat(), result.metrics(), new float[] {gradient[0], gradient[1]});
        }
    }

    private static float[] join(float[] a, float[] b) {
        float[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    private static double softplus(double x) {
        return Math.log1p(Math.exp(x));
    }

    private static double sigmoid(double x) {
        return 1 / (1 + Math.exp(-x));
    }

    @Test
    void sigmoidLossAndRewardMetricsMatchHandComputedValues() {
        Run run = run(new DpoLoss(DpoLossType.SIGMOID, 0.1, 0));
        // −log σ(β h) = softplus(−β h), h = 1 and −2
        assertEquals(softplus(-0.1) + softplus(0.2), run.loss(), 1e-6);
        assertEquals(0.1 * (0.5 + -1) / 2, run.metrics().get("rewards/chosen"), 1e-7);
        assertEquals(0.1 * (-0.5 + 1) / 2, run.metrics().get("rewards/rejected"), 1e-7);
        assertEquals(0.5, run.metrics().get("rewards/accuracies"));
        assertEquals(0.1 * ((0.5 - -0.5) + (-1 - 1)) / 2, run.metrics().get("rewards/margins"), 1e-7);
        assertEquals(-4.0, run.metrics().get("logps/chosen"), 1e-7);
        // d/dπc softplus(−β h) = −β σ(−β h)
        assertEquals(-0.1 * sigmoid(-0.1), run.chosenGradient()[0], 1e-6);
        assertEquals(-0.1 * sigmoid(0.2), run.chosenGradient()[1], 1e-6);
    }

    @Test
    void labelSmoothingEntersTheRobustLossButNotSigmoidAsInTrl() {
        assertEquals(softplus(-0.1) + softplus(0.2), run(new DpoLoss(DpoLossType.SIGMOID, 0.1, 0.2)).loss(), 1e-6);
        Run run = run(new DpoLoss(DpoLossType.ROBUST, 0.1, 0.2));
        double first = (0.8 * softplus(-0.1) - 0.2 * softplus(0.1)) / 0.6;
        double second = (0.8 * softplus(0.2) - 0.2 * softplus(-0.2)) / 0.6;
        assertEquals(first + second, run.loss(), 1e-6);
    }

    @Test
    void weightedTermsAddUpAndSftIsTheChosenTokensMeanNll() {
        // SFT: −Σ chosen log-probs / chosen tokens = 8/6, the same for each of the two pairs
        Run run = run(new DpoLoss(List.of(new DpoLoss.Term(DpoLossType.SIGMOID, 1),
                new DpoLoss.Term(DpoLossType.SFT, 0.5)), 0.1, 0, DpoLoss.DISCOPOP_TAU));
        assertEquals(softplus(-0.1) + softplus(0.2) + 0.5 * 2 * 8.0 / 6, run.loss(), 1e-5);
    }

    @Test
    void ipoIsTheSquaredDistanceToHalfInverseBetaOfPerTokenRatios() {
        Run run = run(new DpoLoss(DpoLossType.IPO, 0.1, 0));
        // (c/|c| − r/|r| − 1/(2β))² with 1/(2β) = 5; ratios 0.5/2 − (−0.5)/1 and −1/4 − 1/5
        double first = 0.25 + 0.5 - 5;
        double second = -0.25 - 0.2 - 5;
        assertEquals(first * first + second * second, run.loss(), 1e-4);
        assertEquals(2 * first / 2, run.chosenGradient()[0], 1e-4);
        assertEquals(-4.0, run.metrics().get("logps/chosen"), 1e-7, "logged as sums, as TRL does for IPO too");
        assertThrows(UserError.class, () -> new DpoLoss(DpoLossType.IPO, 0, 0));
    }

    @Test
    void gradientsVanishAsBetaGoesToZero() {
        double previous = Double.MAX_VALUE;
        for (double beta : new double[] {1, 1e-2, 1e-4, 1e-6}) {
            float[] gradient = run(new DpoLoss(DpoLossType.SIGMOID, beta, 0)).chosenGradient();
            double size = Math.abs(gradient[0]) + Math.abs(gradient[1]);
            assertTrue(size <= 2 * beta, "|β σ(·)| ≤ β per pair; beta " + beta + " gave gradient " + size);
            assertTrue(size < previous);
            previous = size;
        }
        float[] none = run(new DpoLoss(DpoLossType.SIGMOID, 0, 0)).chosenGradient();
        assertEquals(0.0, Math.abs(none[0]), "exactly zero at beta 0");
        assertEquals(0.0, Math.abs(none[1]));
    }
}
