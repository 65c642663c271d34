package dev.finetune.trainers.train.optim;

import ai.djl.ndarray.NDArray;
import dev.finetune.adapters.NamedArray;
import java.util.List;
import java.util.Map;

/**
 * The Hugging Face Trainer's {@code sgd}: {@code torch.optim.SGD} without momentum (no recipe key gives it one), the
 * weight decay added to the gradient, in torch's multi-tensor ops as its foreach path runs them. It keeps no state,
 * which is what the plan counts. Biases and normalisation weights are not decayed, as for {@link AdamW}.
 */
public final class Sgd implements UpdateRule {
    private final List<NamedArray> decayed;
    private final List<NamedArray> plain;
    private final double weightDecay;

    Sgd(List<NamedArray> params, double weightDecay) {
        this.decayed = params.stream().filter(p -> AdamW.isDecayed(p.name())).toList();
        this.plain = params.stream().filter(p -> !AdamW.isDecayed(p.name())).toList();
        this.weightDecay = weightDecay;
    }

    @Override
    public void step(long update, double lr, double gradientScale) {
        for (List<NamedArray> group : List.of(decayed, plain)) {
            if (!group.isEmpty()) {
                OptimizerScript.sgd(group.stream().map(NamedArray::array).toList(), lr,
                        group == decayed ? weightDecay : 0.0, gradientScale);
            }
        }
    }

    @Override
    public void zeroGradients() {
        OptimizerScript.zeroGradients(java.util.stream.Stream.concat(decayed.stream(), plain.stream())
                .map(NamedArray::array).toList());
    }

    @Override
    public Map<String, NDArray> state() {
        return Map.of();
    }

    @Override
    public void load(Map<String, NDArray> state) {
        // nothing kept, nothing to restore
    }
}
