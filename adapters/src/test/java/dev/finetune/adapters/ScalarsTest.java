package dev.finetune.adapters;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.training.GradientCollector;
import org.junit.jupiter.api.Test;

class ScalarsTest {

    @Test
    void cachedConstantKeepsGradientCorrectAcrossGarbageCollection() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Scalars scalars = new Scalars(manager);
            NDArray x = manager.create(new float[] {1f, -2f, 3f});
            x.setRequiresGradient(true);
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                NDArray y = x.mul(scalars.of(3f)).mul(x).sum(); // d/dx 3x² = 6x
                System.gc();
                collector.backward(y);
            }
            assertArrayEquals(new float[] {6f, -12f, 18f}, x.getGradient().toFloatArray(), 1e-6f);
            assertSame(scalars.of(3f), scalars.of(3f));
        }
    }

    @Test
    void constantFirstUsedInsideAStepScopeOutlivesTheScope() {
        try (NDManager manager = NDManager.newBaseManager()) {
            Scalars scalars = new Scalars(manager);
            try (NDScope step = new NDScope()) {
                scalars.of(0.5f);
            }
            assertArrayEquals(new float[] {0.5f}, scalars.of(0.5f).toFloatArray());
        }
    }
}
