package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.training.GradientCollector;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * {@link TokenScores} against the formulation it replaced (log-softmax, gather, exp·log-softmax, argmax, mean), on
 * the logits of a real model: the stories260K checkpoint on its reference prompts, with an ignored target and
 * targets that tie with another token at the maximum, once below it and once above it in index.
 */
class TokenScoresTest {
    private static final int ROWS = 2;
    private static final int COLUMNS = 17;
    /**
     * At a likely target the gradient is p - 1 with p near 1: the subtraction cancels, and each formulation lands
     * a few ulps of 1 (1.2e-7 each) from the exact value on its own side. How many depends on the CPU's vectorised
     * exp and log kernels (seen: old -0.032055914, exact -0.032055802; new -0.032055676 on one machine, -0.032055497
     * on an AVX-512 EPYC): 8 ulps of 1 is the bar.
     */
    private static final double GRADIENT_TOLERANCE = 8 * 0x1p-23;
    private static NDManager manager;
    private static float[] logits;
    private static int vocab;
    private static long[] targets;
    private static float[] weights;
    /** positions whose target ties with another token at the row's maximum */
    private static final int TIE_LOWER_FIRST = 3;
    private static final int TIE_TARGET_FIRST = COLUMNS + 5;

    @BeforeAll
    static void modelLogits() {
        manager = NDManager.newBaseManager();
        LlamaModel model = LlamaModel.load(Stories260KReference.modelDir(), manager, LoadOptions.inference());
        List<Stories260KReference> prompts = Stories260KReference.load();
        long[] ids = new long[ROWS * COLUMNS];
        long[] positions = new long[ROWS * COLUMNS];
        long[][] rows = {prompts.get(2).promptIds(), prompts.get(1).promptIds()};
        for (int r = 0; r < ROWS; r++) {
            for (int t = 0; t < COLUMNS; t++) {
                ids[r * COLUMNS + t] = rows[r][t];
                positions[r * COLUMNS + t] = t;
            }
        }
        boolean gradMode = JniUtils.isGradMode();
        JniUtils.setGradMode(false);
        try (NDManager step = manager.newSubManager()) {
            Shape shape = new Shape(ROWS, COLUMNS);
            NDArray out = model.forward(step.create(ids, shape), step.create(positions, shape), null);
            vocab = (int) out.getShape().get(2);
            logits = out.toFloatArray();
        } finally {
            JniUtils.setGradMode(gradMode);
        }
        targets = new long[ROWS * COLUMNS];
        weights = new float[ROWS * COLUMNS];
        for (int r = 0; r < ROWS; r++) {
            for (int t = 0; t + 1 < COLUMNS; t++) {
                targets[r * COLUMNS + t] = ids[r * COLUMNS + t + 1];
                weights[r * COLUMNS + t] = 1f;
            }
        }
        // an ignored position in the middle of a row (the last of each row is ignored too): target 0, weight 0
        targets[7] = 0;
        weights[7] = 0f;
        tie(TIE_LOWER_FIRST, (int) targets[TIE_LOWER_FIRST] - 1);
        tie(TIE_TARGET_FIRST, (int) targets[TIE_TARGET_FIRST] + 1);
    }

    /** Lifts the target and {@code other} to the same value above every logit of the position. */
    private static void tie(int position, int other) {
        float top = Float.NEGATIVE_INFINITY;
        for (int k = 0; k < vocab; k++) {
            top = Math.max(top, logits[position * vocab + k]);
        }
        logits[position * vocab + (int) targets[position]] = top + 1f;
        logits[position * vocab + other] = top + 1f;
    }

    @AfterAll
    static void close() {
        manager.close();
    }

    /** What the objectives computed before: values, metrics and the gradient of Σ upstream·logp. */
    private record Old(float[] logProbs, float[] entropy, float[] correct, float[] mean, float[] gradient) {}

    private static Old old(float[] upstream) {
        try (NDScope scope = new NDScope()) {
            Shape shape = new Shape(ROWS, COLUMNS);
            NDArray x = leaf();
            NDArray logp;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                NDArray logProbabilities = x.logSoftmax(-1);
                logp = logProbabilities.gather(manager.create(targets, shape).expandDims(-1), -1).squeeze(-1)
                        .mul(manager.create(weights, shape));
                collector.backward(logp.mul(manager.create(upstream, shape)).sum());
            }
            boolean gradMode = JniUtils.isGradMode();
            JniUtils.setGradMode(false);
            try {
                NDArray detached = x.stopGradient();
                NDArray logProbabilities = detached.logSoftmax(-1);
                float[] entropy = logProbabilities.exp().mul(logProbabilities).sum(new int[] {-1}).neg().toFloatArray();
                long[] argmax = detached.argMax(-1).toLongArray();
                float[] correct = new float[argmax.length];
                for (int i = 0; i < argmax.length; i++) {
                    correct[i] = argmax[i] == targets[i] ? 1f : 0f;
                }
                return new Old(logp.toFloatArray(), entropy, correct, detached.mean(new int[] {-1}).toFloatArray(),
                        x.getGradient().toFloatArray());
            } finally {
                JniUtils.setGradMode(gradMode);
            }
        }
    }

    private static NDArray leaf() {
        NDArray x = manager.create(logits, new Shape(ROWS, COLUMNS, vocab));
        x.setRequiresGradient(true);
        return x;
    }

    @Test
    void theSftLossMetricsAndGradientAreThoseOfLogSoftmaxGatherAndArgmax() {
        float[] minusOnes = new float[ROWS * COLUMNS];
        java.util.Arrays.fill(minusOnes, -1f);
        Old old = old(minusOnes);
        double expectedLoss = 0;
        for (int i = 0; i < old.logProbs().length; i++) {
            expectedLoss -= old.logProbs()[i];
        }
        try (NDScope scope = new NDScope()) {
            NDArray x = leaf();
            TokenScores.Sft scored;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                scored = TokenScores.sft(x, targets, weights, manager);
                System.gc();
                collector.backward(scored.loss());
            }
            assertEquals(expectedLoss, scored.loss().getFloat(), 1e-6 * Math.abs(expectedLoss));
            assertClose(old.entropy(), scored.entropy(), 2e-6, "entropy");
            assertArrayEquals(old.correct(), scored.correct(), "argmax hits");
            assertClose(old.gradient(), x.getGradient().toFloatArray(), GRADIENT_TOLERANCE, "gradient");
        }
        assertEquals(0f, old.correct()[TIE_LOWER_FIRST], "argmax takes the lower index of a tie");
        assertEquals(1f, old.correct()[TIE_TARGET_FIRST], "argmax takes the lower index of a tie");
        double hits = 0;
        for (float c : old.correct()) {
            hits += c;
        }
        assertTrue(hits >= 3, "the model predicts some of its own prompt besides the ties: " + hits);
    }

    @Test
    void perTokenLogProbsMetricsAndGradientAreThoseOfLogSoftmaxGatherAndArgmax() {
        float[] upstream = new float[ROWS * COLUMNS];
        for (int i = 0; i < upstream.length; i++) {
            upstream[i] = (float) Math.sin(1.3 * i + 0.4);
        }
        Old old = old(upstream);
        float[] withGradient;
        try (NDScope scope = new NDScope()) {
            NDArray x = leaf();
            TokenScores.PerToken scored;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                scored = TokenScores.perToken(x, targets, weights, manager);
                System.gc();
                collector.backward(scored.logProbs().mul(manager.create(upstream, new Shape(ROWS, COLUMNS))).sum());
            }
            withGradient = scored.logProbs().toFloatArray();
            assertClose(old.logProbs(), withGradient, 1e-6, "log-probabilities");
            assertClose(old.entropy(), scored.entropy(), 2e-6, "entropy");
            assertArrayEquals(old.correct(), scored.correct(), "argmax hits");
            assertArrayEquals(old.mean(), scored.meanLogit(), "mean logit");
            float[] gradient = x.getGradient().toFloatArray();
            assertClose(old.gradient(), gradient, GRADIENT_TOLERANCE, "gradient");
            for (int k = 0; k < vocab; k++) {
                assertEquals(0f, gradient[7 * vocab + k], "the ignored position's gradient is exactly zero");
            }
        }
        // without a gradient (reference log-probabilities) the logits stay as they were and the values are equal
        // (0 and -0 aside), so a policy equal to its reference has a KL of exactly 0
        try (NDScope scope = new NDScope()) {
            NDArray x = manager.create(logits, new Shape(ROWS, COLUMNS, vocab));
            boolean gradMode = JniUtils.isGradMode();
            JniUtils.setGradMode(false);
            try {
                assertClose(withGradient, TokenScores.perToken(x, targets, weights, manager).logProbs().toFloatArray(),
                        0, "log-probabilities without a gradient");
            } finally {
                JniUtils.setGradMode(gradMode);
            }
            assertArrayEquals(logits, x.toFloatArray());
        }
    }

    /** Loss and gradients of the head applied inside the loss, or outside it ({@code logits = normed·Wᵀ}). */
    private record Head(float loss, float[] entropy, float[] correct, float[] normedGradient, float[] weightGradient) {}

    /** @param chunkRows with the head inside, how many positions' logits at a time; 0 for the default */
    private static Head head(float[] normedValues, NDArray weight, boolean inside, boolean weightTrained,
            long chunkRows) {
        try (NDScope scope = new NDScope()) {
            NDArray normed = manager.create(normedValues, new Shape(ROWS, COLUMNS, weight.getShape().get(1)));
            normed.setRequiresGradient(true);
            NDArray w = weight.duplicate();
            w.setRequiresGradient(weightTrained);
            TokenScores.Sft scored;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                if (inside && chunkRows > 0) {
                    scored = TokenScores.sftThroughHead(normed, w, targets, weights, manager, chunkRows);
                } else if (inside) {
                    scored = TokenScores.sftThroughHead(normed, w, targets, weights, manager);
                } else {
                    scored = TokenScores.sft(JniUtils.linear((ai.djl.pytorch.engine.PtNDArray) normed,
                            (ai.djl.pytorch.engine.PtNDArray) w, null), targets, weights, manager);
                }
                // as the loop scales a micro batch's sum by the window's weight
                collector.backward(scored.loss().mul(manager.create(1f / 29f)));
            }
            return new Head(scored.loss().getFloat(), scored.entropy(), scored.correct(),
                    normed.getGradient().toFloatArray(), weightTrained ? w.getGradient().toFloatArray() : null);
        }
    }

    @Test
    void theHeadInsideTheLossGivesTheLossAndGradientsOfTheHeadOutsideIt() {
        LlamaModel model = LlamaModel.load(Stories260KReference.modelDir(), manager, LoadOptions.inference());
        NDArray weight = model.plainHeadWeight();
        assertTrue(weight != null, "stories260K ties its head to the embedding");
        java.util.Random random = new java.util.Random(5);
        float[] normed = new float[(int) (ROWS * COLUMNS * weight.getShape().get(1))];
        for (int i = 0; i < normed.length; i++) {
            normed[i] = (float) (3 * random.nextGaussian());
        }
        // the default takes all 34 positions in one chunk; 5 at a time makes 7 chunks, the last one short
        for (long chunk : new long[] {0, 5}) {
            for (boolean weightTrained : new boolean[] {false, true}) {
                compareHeads(normed, weight, weightTrained, chunk);
            }
        }
    }

    private static void compareHeads(float[] normed, NDArray weight, boolean weightTrained, long chunk) {
        Head outside = head(normed, weight, false, weightTrained, 0);
        Head inside = head(normed, weight, true, weightTrained, chunk);
        assertEquals(outside.loss(), inside.loss(), 1e-6 * Math.abs(outside.loss()), "loss");
        // Chunks of 5 rows are other GEMM shapes than all 34 at once, and some CPUs' kernels block them differently:
        // the logits then differ in their last bits (seen: entropy 1.9399976 against 1.9400003).
        assertClose(outside.entropy(), inside.entropy(), 4e-6, "entropy");
        assertArrayEquals(outside.correct(), inside.correct(), "argmax hits");
        // the same products, scaled by 1/29 before the head's GEMM outside and after it inside
        assertClose(outside.normedGradient(), inside.normedGradient(), 1e-6 * maxAbs(outside.normedGradient()),
                "gradient of the head's input");
        if (weightTrained) {
            assertClose(outside.weightGradient(), inside.weightGradient(), 1e-6 * maxAbs(outside.weightGradient()),
                    "gradient of the head's weight");
        }
    }

    /** Per-token log-probabilities with the head inside or outside, back-propagated with per-position weights. */
    private record HeadPerToken(float[] logProbs, float[] entropy, float[] correct, float[] meanLogit,
            float[] normedGradient, float[] weightGradient) {}

    private static HeadPerToken headPerToken(float[] normedValues, NDArray weight, boolean inside,
            boolean weightTrained, float[] upstream) {
        try (NDScope scope = new NDScope()) {
            NDArray normed = manager.create(normedValues, new Shape(ROWS, COLUMNS, weight.getShape().get(1)));
            normed.setRequiresGradient(true);
            NDArray w = weight.duplicate();
            w.setRequiresGradient(weightTrained);
            TokenScores.PerToken scored;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                scored = inside ? TokenScores.perTokenThroughHead(normed, w, targets, weights, manager)
                        : TokenScores.perToken(JniUtils.linear((ai.djl.pytorch.engine.PtNDArray) normed,
                                (ai.djl.pytorch.engine.PtNDArray) w, null), targets, weights, manager);
                collector.backward(scored.logProbs().mul(manager.create(upstream, new Shape(ROWS, COLUMNS))).sum());
            }
            return new HeadPerToken(scored.logProbs().toFloatArray(), scored.entropy(), scored.correct(),
                    scored.meanLogit(), normed.getGradient().toFloatArray(),
                    weightTrained ? w.getGradient().toFloatArray() : null);
        }
    }

    @Test
    void perTokenLogProbsWithTheHeadInsideAreThoseWithTheHeadOutside() {
        LlamaModel model = LlamaModel.load(Stories260KReference.modelDir(), manager, LoadOptions.inference());
        NDArray weight = model.plainHeadWeight();
        java.util.Random random = new java.util.Random(7);
        float[] normed = new float[(int) (ROWS * COLUMNS * weight.getShape().get(1))];
        for (int i = 0; i < normed.length; i++) {
            normed[i] = (float) (3 * random.nextGaussian());
        }
        // each position's upstream gradient differs, as DPO's and GRPO's per-sequence losses make it
        float[] upstream = new float[ROWS * COLUMNS];
        for (int i = 0; i < upstream.length; i++) {
            upstream[i] = (float) Math.sin(0.7 * i + 0.2);
        }
        for (boolean weightTrained : new boolean[] {false, true}) {
            HeadPerToken outside = headPerToken(normed, weight, false, weightTrained, upstream);
            HeadPerToken inside = headPerToken(normed, weight, true, weightTrained, upstream);
            assertArrayEquals(outside.logProbs(), inside.logProbs(), "log-probabilities");
            assertArrayEquals(outside.entropy(), inside.entropy(), "entropy");
            assertArrayEquals(outside.correct(), inside.correct(), "argmax hits");
            assertArrayEquals(outside.meanLogit(), inside.meanLogit(), "mean logit");
            assertClose(outside.normedGradient(), inside.normedGradient(), 1e-6 * maxAbs(outside.normedGradient()),
                    "gradient of the head's input");
            if (weightTrained) {
                assertClose(outside.weightGradient(), inside.weightGradient(),
                        1e-6 * maxAbs(outside.weightGradient()), "gradient of the head's weight");
            }
        }
    }

    private static double maxAbs(float[] values) {
        double max = 0;
        for (float v : values) {
            max = Math.max(max, Math.abs(v));
        }
        assertTrue(max > 0, "a gradient that is all zero checks nothing");
        return max;
    }

    private static void assertClose(float[] expected, float[] actual, double tolerance, String what) {
        assertEquals(expected.length, actual.length, what);
        for (int i = 0; i < expected.length; i++) {
            assertEquals(expected[i], actual[i], tolerance, what + " at " + i);
        }
    }
}
