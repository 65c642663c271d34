package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.NamedArray;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** The loop's model contract on the real model (stories260K, every weight trainable, packed rows with padding). */
class LlamaTrainableTest {

    private static SftBatch packedBatch() {
        int rows = 2;
        int columns = 24;
        Random random = new Random(5);
        long[] ids = new long[rows * columns];
        long[] positions = new long[rows * columns];
        long[] segments = new long[rows * columns];
        long[] labels = new long[rows * columns];
        // row 0: two packed examples of 10 and 14 tokens; row 1: one example of 17 tokens, then padding
        int[][] examples = {{10, 14}, {17}};
        for (int r = 0; r < rows; r++) {
            int t = 0;
            for (int e = 0; e < examples[r].length; e++) {
                for (int k = 0; k < examples[r][e]; k++, t++) {
                    int i = r * columns + t;
                    ids[i] = 1 + random.nextInt(500);
                    positions[i] = k;
                    segments[i] = e + 1;
                    labels[i] = k < 3 ? SftBatch.IGNORE : ids[i];
                }
            }
            for (; t < columns; t++) {
                labels[r * columns + t] = SftBatch.IGNORE;
            }
        }
        return new SftBatch(rows, columns, ids, positions, segments, labels);
    }

    private static List<float[]> gradients(LlamaTrainable trainable, SftBatch batch, boolean recompute,
            NDManager manager) {
        List<float[]> result = new ArrayList<>();
        try (NDScope scope = new NDScope()) {
            ForwardPass forward = ForwardPass.of(trainable, 99, recompute);
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                forward.backward(new SftObjective().loss(batch, forward, manager).sum(), collector);
            }
            for (NamedArray param : trainable.trainable()) {
                result.add(param.array().getGradient().toFloatArray());
                JniUtils.zeroGrad((PtNDArray) param.array());
            }
        }
        return result;
    }

    @Test
    void layerByLayerForwardEqualsTheModelsOwnAndRecomputationKeepsGradients() {
        try (NDManager manager = NDManager.newBaseManager()) {
            LlamaModel model = LlamaModel.load(Stories260KReference.modelDir(), manager, LoadOptions.fullFineTune());
            LlamaTrainable trainable = new LlamaTrainable(model);
            SftBatch batch = packedBatch();
            try (NDScope scope = new NDScope()) {
                Shape shape = new Shape(batch.rows(), batch.columns());
                ModelInputs inputs = new ModelInputs(manager.create(batch.inputIds(), shape),
                        manager.create(batch.positionIds(), shape), manager.create(batch.segmentIds(), shape));
                float[] own = model.forward(inputs.inputIds(), inputs.positionIds(), inputs.segmentIds())
                        .toFloatArray();
                float[] loops = ForwardPass.of(trainable, 1, false).logits(inputs).toFloatArray();
                assertArrayEquals(own, loops);
            }
            List<float[]> direct = gradients(trainable, batch, false, manager);
            List<float[]> recomputed = gradients(trainable, batch, true, manager);
            assertEquals(model.trainable().size(), direct.size());
            double largest = 0;
            for (int p = 0; p < direct.size(); p++) {
                for (int i = 0; i < direct.get(p).length; i++) {
                    largest = Math.max(largest, Math.abs(direct.get(p)[i]));
                    assertEquals(direct.get(p)[i], recomputed.get(p)[i], 1e-5,
                            model.trainable().get(p).name() + "[" + i + "]");
                }
            }
            assertTrue(largest > 1e-3);
        }
    }
}
