package dev.finetune.trainers.model;

import ai.djl.ndarray.NDArray;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.Scalars;
import dev.finetune.adapters.ScriptArguments;

/** {@code x / sqrt(mean(x²) + eps) · weight} over the last axis; composed because the engine has no rms_norm. */
final class RmsNorm {
    private final NamedArray weight;
    private final NDArray epsilon;
    private final NDArray minusHalf;
    private final NDArray one;

    RmsNorm(NamedArray weight, float epsilon, Scalars scalars) {
        this.weight = weight;
        this.epsilon = scalars.of(epsilon);
        this.minusHalf = scalars.of(-0.5f);
        this.one = scalars.of(1f);
    }

    NamedArray weight() {
        return weight;
    }

    /** {@link #forward} as a TorchScript expression over the variable {@code x}: the same ops in the same order. */
    String script(String x, ScriptArguments arguments) {
        return "torch.mul(torch.mul(" + x + ", torch.pow(torch.add(torch.mean(torch.square(" + x + "), [-1], True), "
                + arguments.tensor(epsilon) + "), " + arguments.tensor(minusHalf) + ")), " + arguments.tensor(weight.array())
                + ")";
    }

    NDArray forward(NDArray x) {
        NDArray inverseRms = x.square().mean(new int[] {-1}, true).add(epsilon).pow(minusHalf);
        return x.mul(inverseRms).mul(weight.array());
    }

    /**
     * The norm as Hugging Face's {@code LlamaRMSNorm} computes it, for inference: {@code weight · (x · rsqrt(mean(x²)
     * + eps))}. A tensor exponent makes {@link #forward}'s {@code pow} torch's general power, which rounds
     * differently from {@code rsqrt} (1/√v), and that alone puts a trained checkpoint's logits several float
     * spacings away from PEFT's. Training keeps {@link #forward}, so its loss sequences do not move.
     */
    NDArray infer(NDArray x) {
        NDArray inverseRms = one.div(x.square().mean(new int[] {-1}, true).add(epsilon).sqrt());
        return weight.array().mul(x.mul(inverseRms));
    }

    /** {@link #infer} as a TorchScript expression over the variable {@code x}. */
    String inferScript(String x, ScriptArguments arguments) {
        return "torch.mul(" + arguments.tensor(weight.array()) + ", torch.mul(" + x + ", torch.rsqrt(torch.add(torch.mean("
                + "torch.square(" + x + "), [-1], True), " + arguments.tensor(epsilon) + "))))";
    }
}
