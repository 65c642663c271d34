package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.NamedArray;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class ForwardPassTest {

    /** Gradients of every trainable array after one SFT backward, with or without recomputation. */
    private static List<float[]> gradients(boolean recompute, boolean trainEmbedding) {
        List<float[]> result = new ArrayList<>();
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 13, 8, 3, 0.25, trainEmbedding, 7);
            SftBatch batch = ToyData.batch(new Random(3), 3, 9, 13);
            try (NDScope scope = new NDScope()) {
                ForwardPass forward = ForwardPass.of(model, 1234, recompute);
                try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                    // two forward calls into one loss, as DPO makes them
                    NDArray loss = new SftObjective().loss(batch, forward, manager).sum()
                            .add(new SftObjective().loss(batch, forward, manager).sum());
                    forward.backward(loss, collector);
                }
                for (NamedArray param : model.trainable()) {
                    result.add(param.array().getGradient().toFloatArray());
                    JniUtils.zeroGrad((PtNDArray) param.array());
                }
            }
        }
        return result;
    }

    @ParameterizedTest(name = "trainable embedding: {0}")
    @ValueSource(booleans = {true, false})
    void recomputedLayersGiveTheSameGradientsAsTheDirectPathDropoutIncluded(boolean trainEmbedding) {
        List<float[]> direct = gradients(false, trainEmbedding);
        List<float[]> recomputed = gradients(true, trainEmbedding);
        assertEquals(direct.size(), recomputed.size());
        double largest = 0;
        for (int p = 0; p < direct.size(); p++) {
            for (int i = 0; i < direct.get(p).length; i++) {
                largest = Math.max(largest, Math.abs(direct.get(p)[i]));
                assertEquals(direct.get(p)[i], recomputed.get(p)[i], 1e-6, "parameter " + p + " element " + i);
            }
        }
        assertTrue(largest > 1e-3, "gradients must not be trivially zero");
    }
}
