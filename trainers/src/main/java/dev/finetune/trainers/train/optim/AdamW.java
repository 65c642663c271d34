package dev.finetune.trainers.train.optim;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * AdamW with decoupled weight decay, as {@code torch.optim.AdamW}, on torch's fused multi-tensor kernel.
 *
 * <p>Two groups, as the Hugging Face Trainer builds them: biases and normalisation weights are not decayed.
 * Moments live in the long-lived {@code stateManager} given at construction, never in a step scope (a scope
 * would free them after the first step).
 */
public final class AdamW implements UpdateRule {

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
     * by {@code gradientScale} (the clipping factor); then zeroes the gradients. Each decay group is one call into
     * torch's fused AdamW kernel, the one {@code torch.optim.AdamW(fused=True)} runs, over all its tensors.
     */
    @Override
    public void step(long update, double lr, double gradientScale) {
        for (boolean decayed : new boolean[] {true, false}) {
            List<NDArray> params = new ArrayList<>();
            List<NDArray> first = new ArrayList<>();
            List<NDArray> second = new ArrayList<>();
            for (Slot slot : slots) {
                if (slot.decayed == decayed) {
                    params.add(slot.param.array());
                    first.add(slot.firstMoment);
                    second.add(slot.secondMoment);
                }
            }
            if (!params.isEmpty()) {
                OptimizerScript.adamw(params, first, second, update, lr, hyper.beta1(), hyper.beta2(),
                        hyper.epsilon(), decayed ? hyper.weightDecay() : 0.0, gradientScale);
            }
        }
    }

    @Override
    public void zeroGradients() {
        OptimizerScript.zeroGradients(slots.stream().map(slot -> slot.param.array()).toList());
    }

    /** The moments under {@code exp_avg.<name>} and {@code exp_avg_sq.<name>}, torch's state names. */
    @Override
    public Map<String, NDArray> state() {
        Map<String, NDArray> state = new LinkedHashMap<>();
        for (Slot slot : slots) {
            state.put("exp_avg." + slot.param.name(), slot.firstMoment);
            state.put("exp_avg_sq." + slot.param.name(), slot.secondMoment);
        }
        return state;
    }

    /** Overwrites the moments in place from {@link #state()}-named arrays; every moment must be present. */
    @Override
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
