package dev.finetune.trainers.train.optim;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.IValue;
import dev.finetune.trainers.model.TorchScript;
import java.util.List;

/**
 * The work after backward as a few native calls: the gradient norm, the clipping scale and the AdamW update each
 * run over every tensor at once in torch's multi-tensor kernels ({@code optimizer.py}), instead of several JNI
 * calls per tensor (a LoRA step of the small bench shape made 842 of them after backward).
 *
 * <p>Compiled once per process, like code, and kept for its lifetime.
 */
final class OptimizerScript {
    private static TorchScript script;

    private OptimizerScript() {}

    private static synchronized TorchScript script() {
        if (script == null) {
            script = TorchScript.load("/dev/finetune/trainers/train/optim/optimizer.py", "Optimizer",
                    NDManager.newBaseManager());
        }
        return script;
    }

    static double gradientNorm(List<NDArray> params) {
        try (IValue list = list(params); IValue norm = script().call("gradient_norm", list)) {
            return norm.toDouble();
        }
    }

    /** One AdamW update over {@code params} with their moments; {@code hyper} as {@code optimizer.py} orders it. */
    static void adamw(List<NDArray> params, List<NDArray> firstMoments, List<NDArray> secondMoments, double... hyper) {
        try (IValue p = list(params); IValue m = list(firstMoments); IValue v = list(secondMoments);
                IValue h = IValue.listFrom(hyper); IValue ignored = script().call("adamw", p, m, v, h)) {
            // updated in place
        }
    }

    /** One update of torch.optim.SGD without momentum: lr, weight decay (added to the gradient), gradient scale. */
    static void sgd(List<NDArray> params, double... hyper) {
        try (IValue p = list(params); IValue h = IValue.listFrom(hyper); IValue ignored = script().call("sgd", p, h)) {
            // updated in place
        }
    }

    static void zeroGradients(List<NDArray> params) {
        try (IValue list = list(params); IValue ignored = script().call("zero_gradients", list)) {
            // zeroed in place
        }
    }

    private static IValue list(List<NDArray> arrays) {
        return IValue.listFrom(arrays.stream().map(a -> (PtNDArray) a).toArray(PtNDArray[]::new));
    }
}
