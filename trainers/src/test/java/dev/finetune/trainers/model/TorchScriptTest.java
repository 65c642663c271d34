package dev.finetune.trainers.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.engine.Engine;
import ai.djl.engine.EngineException;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.IValue;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.training.GradientCollector;
import org.junit.jupiter.api.Test;

class TorchScriptTest {
    private static final String SOURCE = String.join("\n",
            "class Probe(Module):",
            "  __parameters__ = []",
            "  __buffers__ = []",
            "  training : bool",
            "  def forward(self: __torch__.Probe, x: Tensor, w: Tensor) -> Tensor:",
            "    g = torch.linear(x, w)",
            "    return g * torch.sigmoid(g)",
            "  def total(self: __torch__.Probe, xs: List[Tensor]) -> float:",
            "    return float(torch.sum(torch.stack(xs)).item())",
            "");

    @Test
    void aModuleBuiltFromSourceRecordsTheSameGradientsAsTheSameOpsCalledFromJava() {
        try (NDManager manager = NDManager.newBaseManager()) {
            TorchScript script = TorchScript.compile("Probe", SOURCE, manager);
            Engine.getInstance().setRandomSeed(7);
            NDArray x = manager.randomNormal(new Shape(3, 4));
            NDArray w = manager.randomNormal(new Shape(5, 4));
            w.setRequiresGradient(true);
            float[] scripted;
            float[] output;
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                NDArray y = script.forward(new NDList(x, w)).singletonOrThrow();
                output = y.toFloatArray();
                collector.backward(y.sum());
            }
            scripted = w.getGradient().toFloatArray();
            JniUtils.zeroGrad((PtNDArray) w);
            try (GradientCollector collector = Engine.getInstance().newGradientCollector()) {
                NDArray g = JniUtils.linear((PtNDArray) x, (PtNDArray) w, null);
                NDArray y = g.mul(g.getNDArrayInternal().sigmoid());
                assertArrayEquals(y.toFloatArray(), output, 0f);
                collector.backward(y.sum());
            }
            assertArrayEquals(w.getGradient().toFloatArray(), scripted, 0f);
        }
    }

    @Test
    void otherMethodsTakeListsAndReturnNumbers() {
        try (NDManager manager = NDManager.newBaseManager()) {
            TorchScript script = TorchScript.compile("Probe", SOURCE, manager);
            NDArray a = manager.create(new float[] {1f, 2f});
            NDArray b = manager.create(new float[] {3f, 4f});
            try (IValue list = IValue.listFrom((PtNDArray) a, (PtNDArray) b); IValue sum = script.call("total", list)) {
                assertEquals(10.0, sum.toDouble());
            }
        }
    }

    @Test
    void sourceThatDoesNotCompileFailsAtLoad() {
        try (NDManager manager = NDManager.newBaseManager()) {
            EngineException e = assertThrows(EngineException.class,
                    () -> TorchScript.compile("Probe", SOURCE.replace("torch.linear", "torch.no_such_op"), manager));
            assertEquals(true, e.getMessage().contains("no_such_op"), e.getMessage());
        }
    }
}
