package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
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
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * Rows of one segment each (no packing, no padding) let the compiled layers' attention skip the blocks above the
 * diagonal instead of adding the mask: the logits and every gradient are those of the masked attention.
 */
class CausalAttentionTest {
    private static final int ROWS = 2;
    private static final int COLUMNS = 40;

    @Test
    void onlyRowsOfOneSegmentCount() {
        try (NDManager manager = NDManager.newBaseManager()) {
            assertTrue(LlamaTrainable.oneSegmentPerRow(manager.create(new long[] {3, 3, 3, 1, 1, 1}, new Shape(2, 3))));
            assertFalse(LlamaTrainable.oneSegmentPerRow(manager.create(new long[] {1, 1, 2, 1, 1, 1}, new Shape(2, 3))),
                    "two packed examples");
            assertFalse(LlamaTrainable.oneSegmentPerRow(manager.create(new long[] {1, 1, 1, 1, 1, 0}, new Shape(2, 3))),
                    "padding");
            assertTrue(LlamaTrainable.oneSegmentPerRow(null));
        }
    }

    @Test
    void skippingTheMaskedBlocksGivesTheMaskedAttentionsLogitsAndGradients() {
        try (NDManager manager = NDManager.newBaseManager()) {
            LlamaModel model = LlamaModel.load(Stories260KReference.modelDir(), manager, LoadOptions.fullFineTune());
            LlamaTrainable trainable = new LlamaTrainable(model);
            Random random = new Random(3);
            long[] ids = new long[ROWS * COLUMNS];
            long[] positions = new long[ROWS * COLUMNS];
            long[] segments = new long[ROWS * COLUMNS];
            for (int i = 0; i < ids.length; i++) {
                ids[i] = 1 + random.nextInt(500);
                positions[i] = i % COLUMNS;
                segments[i] = 1;
            }
            Shape shape = new Shape(ROWS, COLUMNS);
            List<List<float[]>> runs = new ArrayList<>();
            for (boolean causal : new boolean[] {true, false}) {
                List<float[]> run = new ArrayList<>();
                try (NDScope scope = new NDScope();
                        GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                    ModelInputs inputs = new ModelInputs(manager.create(ids, shape), manager.create(positions, shape),
                            manager.create(segments, shape));
                    LlamaTrainable.Shared prepared = trainable.prepare(inputs);
                    assertTrue(prepared.causal());
                    LlamaTrainable.Shared shared = new LlamaTrainable.Shared(prepared.angles(), prepared.mask(), causal);
                    NDArray hidden = trainable.embed(inputs);
                    for (TrainableModel.Layer<LlamaTrainable.Shared> layer : trainable.layers()) {
                        hidden = layer.forward(hidden, shared);
                    }
                    NDArray logits = trainable.finalNormAndHead(hidden);
                    run.add(logits.toFloatArray());
                    collector.backward(logits.logSoftmax(-1).get(":, :, 7").sum());
                }
                for (NamedArray param : trainable.trainable()) {
                    run.add(param.array().getGradient().toFloatArray());
                    JniUtils.zeroGrad((PtNDArray) param.array());
                }
                runs.add(run);
            }
            double worst = 0;
            for (int p = 0; p < runs.get(0).size(); p++) {
                for (int i = 0; i < runs.get(0).get(p).length; i++) {
                    worst = Math.max(worst, Math.abs(runs.get(0).get(p)[i] - runs.get(1).get(p)[i]));
                }
            }
            System.out.printf("causal vs masked attention: logits and %d gradients max |diff| %.3g%n",
                    runs.get(0).size() - 1, worst);
            assertEquals(0, worst, 1e-5);
        }
    }
}
