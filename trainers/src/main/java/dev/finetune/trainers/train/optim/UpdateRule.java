package dev.finetune.trainers.train.optim;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.Optimizer;
import java.util.List;
import java.util.Map;

/** What the trainer asks of its optimizer: one update from the gradients, and the state a checkpoint keeps. */
public interface UpdateRule {

    /**
     * Applies update number {@code update} (1-based) with learning rate {@code lr}, each gradient first multiplied by
     * {@code gradientScale} (the clipping factor); then zeroes the gradients.
     */
    void step(long update, double lr, double gradientScale);

    /** Zeroes every gradient without updating (a skipped or evaluation-only step). */
    void zeroGradients();

    /** The state under torch's names, for checkpoints; empty where the rule keeps none. */
    Map<String, NDArray> state();

    /** Overwrites the state in place from {@link #state()}-named arrays. */
    void load(Map<String, NDArray> state);

    /**
     * The recipe's optimizer ({@code null}: the default AdamW). validate lets only the 32-bit AdamW spellings and SGD
     * reach this trainer; their state lives in {@code stateManager}.
     */
    static UpdateRule of(Optimizer optimizer, List<NamedArray> params, AdamW.Hyper hyper, NDManager stateManager) {
        if (optimizer == Optimizer.SGD) {
            return new Sgd(params, hyper.weightDecay());
        }
        if (optimizer != null && optimizer.stateBytesPerParam() != 8) {
            throw new IllegalStateException("validate lets no " + optimizer.axolotlName() + " reach the JVM trainer");
        }
        return new AdamW(params, hyper, stateManager);
    }
}
