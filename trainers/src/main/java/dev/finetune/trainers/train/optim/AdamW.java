package dev.finetune.trainers.train.optim;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.NamedArray;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * AdamW with decoupled weight decay, as {@code torch.optim.AdamW}, on the engine's fused kernel.
 *
 * <p>Two groups, as the Hugging Face Trainer builds them: biases and normalisation weights are not decayed.
 * Moments live in the long-lived {@code stateManager} given at construction, never in a step scope (a scope
 * would free them after the first step).
 */
public final class AdamW {

    /** {@code adam_beta1}, {@code adam_beta2}, {@code adam_epsilon}, {@code weight_decay}. */
    public record Hyper(double beta1, double beta2, double epsilon, double weightDecay) {}

    private record Slot(NamedArray param, NDArray firstMoment, NDArray secondMoment, boolean decayed) {}

    private final Hyper hyper;
    private final List<Slot> slots = new ArrayList<>();

    public AdamW(List<NamedArray> params, Hyper hyper, NDManager stateManager) {
        this.hyper = hyper;
        for (NamedArray param : params) {
            NDArray array = param.array();
            slots.add(new Slot(param,
                    stateManager.zeros(array.getShape(), array.getDataType()),
                    stateManager.zeros(array.getShape(), array.getDataType()),
                    isDecayed(param.name())));
        }
    }

    /** Hugging Face's rule: every weight decays except biases and normalisation layers' weights. */
    public static boolean isDecayed(String name) {
        String lower = name.toLowerCase(Locale.ROOT);
        return !(lower.endsWith("bias") || lower.contains("norm"));
    }

    /**
     * Applies update number {@code update} (1-based) with learning rate {@code lr}, each gradient first multiplied
     * by {@code gradientScale} (the clipping factor); then zeroes the gradients.
     */
    public void step(long update, double lr, double gradientScale) {
        double firstCorrection = 1 - Math.pow(hyper.beta1(), update);
        double secondCorrectionRoot = Math.sqrt(1 - Math.pow(hyper.beta2(), update));
        // The kernel computes w -= lrc·m/(√v + ε'). With lrc = lr·√(1-β₂ᵗ)/(1-β₁ᵗ) and ε' = ε·√(1-β₂ᵗ) this is
        // exactly torch's w -= lr/(1-β₁ᵗ) · m/(√v/√(1-β₂ᵗ) + ε).
        float correctedLr = (float) (lr * secondCorrectionRoot / firstCorrection);
        float epsilon = (float) (hyper.epsilon() * secondCorrectionRoot);
        for (Slot slot : slots) {
            PtNDArray weight = (PtNDArray) slot.param.array();
            float decay = slot.decayed ? (float) hyper.weightDecay() : 0f;
            try (NDArray gradient = weight.getGradient()) {
                // The kernel's decoupled-decay branch computes w -= w·lr·wd through two full-size temporaries even
                // when wd is 0 (every norm, and every weight at the usual weight_decay 0); its L2 branch with wd 0
                // is the same update for one in-place pass.
                JniUtils.adamUpdate(weight, (PtNDArray) gradient, (PtNDArray) slot.firstMoment,
                        (PtNDArray) slot.secondMoment, (float) lr, correctedLr, decay, (float) gradientScale, -1f,
                        (float) hyper.beta1(), (float) hyper.beta2(), epsilon, decay != 0f);
            }
            JniUtils.zeroGrad(weight);
        }
    }

    /** Zeroes every gradient without updating (a skipped or evaluation-only step). */
    public void zeroGradients() {
        for (Slot slot : slots) {
            JniUtils.zeroGrad((PtNDArray) slot.param.array());
        }
    }

    /** The moments under {@code exp_avg.<name>} and {@code exp_avg_sq.<name>}, torch's state names. */
    public Map<String, NDArray> state() {
        Map<String, NDArray> state = new LinkedHashMap<>();
        for (Slot slot : slots) {
            state.put("exp_avg." + slot.param.name(), slot.firstMoment);
            state.put("exp_avg_sq." + slot.param.name(), slot.secondMoment);
        }
        return state;
    }

    /** Overwrites the moments in place from {@link #state()}-named arrays; every moment must be present. */
    public void load(Map<String, NDArray> state) {
        for (Map.Entry<String, NDArray> entry : state().entrySet()) {
            NDArray saved = state.get(entry.getKey());
            if (saved == null) {
                throw new IllegalStateException("optimizer state lacks " + entry.getKey());
            }
            if (!saved.getShape().equals(entry.getValue().getShape())) {
                throw new IllegalStateException("optimizer state " + entry.getKey() + " has shape " + saved.getShape()
                        + ", expected " + entry.getValue().getShape());
            }
            saved.copyTo(entry.getValue());
        }
    }
}
