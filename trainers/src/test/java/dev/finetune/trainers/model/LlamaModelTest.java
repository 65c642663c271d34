package dev.finetune.trainers.model;

import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import java.util.Arrays;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class LlamaModelTest {
    static NDManager manager;
    static LlamaModel model;

    @BeforeAll
    static void load() {
        manager = NDManager.newBaseManager();
        model = LlamaModel.load(Stories260KReference.modelDir(), manager, LoadOptions.inference());
    }

    @AfterAll
    static void close() {
        manager.close();
    }

    @Test
    void forwardMatchesLlama2cOnEveryReferencePrompt() {
        for (Stories260KReference ref : Stories260KReference.load()) {
            try (NDManager step = manager.newSubManager()) {
                int n = ref.promptIds().length;
                NDArray ids = step.create(ref.promptIds()).expandDims(0);
                NDArray positions = step.arange(0, n, 1, DataType.INT64).expandDims(0);
                NDArray logits = model.forward(ids, positions, null);
                float[] last = logits.get(new NDIndex("0, -1, :")).toFloatArray();
                float lastDiff = Stories260KReference.maxAbsDiff(ref.lastLogits(), last);
                assertTrue(lastDiff < 1e-4f, "last logits differ by " + lastDiff + " for " + Arrays.toString(ref.promptIds()));
                float first8Diff = 0;
                for (int t = 0; t < n; t++) {
                    float[] first8 = logits.get(new NDIndex("0, {}, 0:8", t)).toFloatArray();
                    float diff = Stories260KReference.maxAbsDiff(ref.promptLogitsFirst8()[t], first8);
                    assertTrue(diff < 1e-4f, "position " + t + " first 8 logits differ by " + diff);
                    first8Diff = Math.max(first8Diff, diff);
                }
                System.out.printf("stories260K prompt of %d tokens: max |logit - reference| last position %.3g, first 8 at every position %.3g%n",
                        n, lastDiff, first8Diff);
            }
        }
    }
}
