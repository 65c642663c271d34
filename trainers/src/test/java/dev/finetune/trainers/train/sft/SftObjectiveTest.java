package dev.finetune.trainers.train.sft;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import ai.djl.training.GradientCollector;
import org.junit.jupiter.api.Test;

class SftObjectiveTest {

    @Test
    void crossEntropyIsSummedOverShiftedTargetsAndIgnoresMinus100() {
        int rows = 2;
        int columns = 3;
        int vocab = 4;
        float[] logits = new float[rows * columns * vocab];
        for (int i = 0; i < logits.length; i++) {
            logits[i] = (float) Math.sin(1.7 * i) * 2f;
        }
        long[] labels = {-100, 2, 1, -100, -100, 3};
        SftBatch batch = new SftBatch(rows, columns, new long[6], new long[6], new long[] {1, 1, 1, 1, 1, 0}, labels);
        assertEquals(3, batch.lossWeight());
        assertEquals(5, batch.tokenCount());
        // targets: position (0,0) predicts 2, (0,1) predicts 1, (1,1) predicts 3
        double expected = nll(logits, 0, 2, vocab) + nll(logits, 1, 1, vocab) + nll(logits, 4, 3, vocab);
        try (NDManager manager = NDManager.newBaseManager()) {
            NDArray x = manager.create(logits, new Shape(rows, columns, vocab)).duplicate();
            x.setRequiresGradient(true);
            NDArray loss;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                loss = SftObjective.sumOfTokenLosses(x, batch, manager);
                System.gc();
                collector.backward(loss);
            }
            assertEquals(expected, loss.getFloat(), 1e-5);
            float[] gradient = x.getGradient().toFloatArray();
            for (int position : new int[] {2, 3, 5}) {
                for (int k = 0; k < vocab; k++) {
                    assertEquals(0f, gradient[position * vocab + k], "ignored position " + position);
                }
            }
            // d/dlogit of -log softmax = softmax - onehot
            assertEquals(softmax(logits, 0, 2, vocab) - 1, gradient[2], 1e-6);
        }
    }

    private static double nll(float[] logits, int position, int target, int vocab) {
        return -Math.log(softmax(logits, position, target, vocab));
    }

    private static double softmax(float[] logits, int position, int k, int vocab) {
        double total = 0;
        for (int j = 0; j < vocab; j++) {
            total += Math.exp(logits[position * vocab + j]);
        }
        return Math.exp(logits[position * vocab + k]) / total;
    }
}
