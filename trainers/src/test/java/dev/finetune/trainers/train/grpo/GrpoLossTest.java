package dev.finetune.trainers.train.grpo;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import ai.djl.training.GradientCollector;
import dev.finetune.recipes.ScaleRewards;
import org.junit.jupiter.api.Test;

/** Group normalisation, clipping and the KL term against values worked out by hand. */
class GrpoLossTest {

    @Test
    void advantagesAreNormalisedWithinEachGroup() {
        Advantages a = Advantages.of(new double[] {1, 0, 0, 1, 2, 2, 2, 2}, 4, ScaleRewards.GROUP);
        double std = Math.sqrt((4 * 0.25) / 3); // unbiased, as torch.std
        double up = 0.5 / (std + 1e-4);
        assertArrayEquals(new double[] {up, -up, -up, up, 0, 0, 0, 0}, a.values(), 1e-12);
        // TRL's reward_std is over the batch: mean 1.25, squares 1.5625·… summed 5.5, over 7
        assertEquals(Math.sqrt(5.5 / 7), a.rewardStd(), 1e-12);
        assertEquals(0.5, a.zeroStdShare(), 1e-12, "the second group's rewards are all equal");
        Advantages centred = Advantages.of(new double[] {3, 1, 5, 5}, 2, ScaleRewards.NONE);
        assertArrayEquals(new double[] {1, -1, 0, 0}, centred.values(), 1e-12);
        Advantages batch = Advantages.of(new double[] {3, 1, 5, 5}, 2, ScaleRewards.BATCH);
        double batchStd = Math.sqrt((0.25 + 6.25 + 2.25 + 2.25) / 3); // around the batch mean 3.5
        assertArrayEquals(new double[] {1 / (batchStd + 1e-4), -1 / (batchStd + 1e-4), 0, 0}, batch.values(), 1e-12);
    }

    /**
     * Row 0 (advantage +1): ratios 1.5 (clipped to 1.2: no gradient) and 0.5, a padding slot. Row 1 (advantage −1):
     * ratios 0.5 (clipped to 0.8: no gradient), 1.5 and 1.
     */
    private static final float[] RATIOS = {1.5f, 0.5f, 1f, 0.5f, 1.5f, 1f};
    private static final float[] MASK = {1, 1, 0, 1, 1, 1};
    private static final double[] ADVANTAGES = {1, -1};

    private record Run(double loss, double kl, double clipRatio, float[] gradient) {}

    private static Run run(double beta) {
        float[] logp = {-1f, -2f, 0f, -0.5f, -1.5f, -3f};
        float[] old = new float[6];
        float[] ref = new float[6];
        for (int i = 0; i < 6; i++) {
            logp[i] *= MASK[i];
            old[i] = MASK[i] * (logp[i] - (float) Math.log(RATIOS[i]));
            ref[i] = MASK[i] * (logp[i] + (float) Math.log(2));
        }
        try (NDManager manager = NDManager.newBaseManager()) {
            Shape shape = new Shape(2, 3);
            NDArray policy = manager.create(logp, shape).duplicate();
            policy.setRequiresGradient(true);
            GrpoLoss.Result result;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                result = new GrpoLoss(0.2, beta).compute(policy, manager.create(old, shape),
                        manager.create(ref, shape), ADVANTAGES, MASK, manager);
                System.gc();
                collector.backward(result.sum());
            }
            return new Run(result.sum().getFloat(), result.metrics().getOrDefault("kl", 0.0),
                    result.metrics().get("clip_ratio/region_mean"), policy.getGradient().toFloatArray());
        }
    }

    @Test
    void clippedPolicyRatioLossAndItsGradient() {
        Run run = run(0);
        // row 0: −min(1.5, 1.2) and −min(0.5, 0.8), mean over 2 tokens; row 1: −min(−0.5, −0.8), −min(−1.5, −1.2),
        // −min(−1, −1), mean over 3 tokens
        assertEquals((-1.2 - 0.5) / 2 + (0.8 + 1.5 + 1.0) / 3, run.loss(), 1e-6);
        assertEquals(2.0 / 5, run.clipRatio(), 1e-12, "one token clipped in each row, five tokens");
        assertEquals(0.0, run.kl());
        // d/dlogp of −ratio·A is −A·ratio where not clipped, 0 where clipped; divided by the row's length
        assertArrayEquals(new float[] {0f, -0.5f / 2, 0f, 0f, 1.5f / 3, 1f / 3}, run.gradient(), 1e-6f);
    }

    @Test
    void klTermPullsTowardsTheReference() {
        Run run = run(0.5);
        double kl = 2 - Math.log(2) - 1; // e^d − d − 1 with d = ref − logp = ln 2
        assertEquals(kl, run.kl(), 1e-6);
        assertEquals((-1.2 - 0.5) / 2 + (0.8 + 1.5 + 1.0) / 3 + 2 * 0.5 * kl, run.loss(), 1e-5);
        // the KL term adds β·(1 − e^d) = −0.5 per token, over the row's length
        assertArrayEquals(new float[] {-0.5f / 2, (-0.5f - 0.5f) / 2, 0f, -0.5f / 3, (1.5f - 0.5f) / 3,
            (1f - 0.5f) / 3}, run.gradient(), 1e-6f);
    }
}
