package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.pytorch.jni.JniUtils;
import java.util.List;

/**
 * Runs a model outside the gradient scope: for reference log-probabilities (DPO, GRPO's KL term), which must not
 * enter the graph and must not go through {@link ForwardPass}, whose recomputing kind would keep a tape for them.
 */
public final class NoGradient {
    private NoGradient() {}

    /**
     * {@code inputs → logits [B, T, V]} with autograd off, whatever the thread had. The base model has no dropout
     * and a disabled LoRA adapter skips its own, so a reference pass draws nothing random.
     */
    public static <C> NDArray logits(TrainableModel<C> model, ModelInputs inputs) {
        boolean gradMode = JniUtils.isGradMode();
        JniUtils.setGradMode(false);
        try {
            C context = model.prepare(inputs);
            NDArray hidden = model.embed(inputs);
            List<? extends TrainableModel.Layer<C>> layers = model.layers();
            for (TrainableModel.Layer<C> layer : layers) {
                hidden = layer.forward(hidden, context);
            }
            return model.finalNormAndHead(hidden);
        } finally {
            JniUtils.setGradMode(gradMode);
        }
    }
}
