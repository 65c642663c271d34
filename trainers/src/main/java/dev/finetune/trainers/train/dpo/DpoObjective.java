package dev.finetune.trainers.train.dpo;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.trainers.train.CompletionRows;
import dev.finetune.trainers.train.ForwardPass;
import dev.finetune.trainers.train.ModelInputs;
import dev.finetune.trainers.train.NoGradient;
import dev.finetune.trainers.train.Objective;
import dev.finetune.trainers.train.TrainableModel;
import java.util.ArrayList;
import java.util.List;

/**
 * Direct preference optimisation: one forward pass over the chosen and rejected rows of a batch, their sequence
 * log-probabilities against the reference model's, and {@link DpoLoss}.
 *
 * <p>The reference is never a second copy of the weights. With an adapter it is the same model with the adapter
 * switched off, run outside the gradient scope right before the policy pass; with full fine-tuning the weights
 * change, so the reference values are computed once before training ({@link #precompute}) and ride in the batches.
 */
public final class DpoObjective implements Objective<DpoBatch> {
    private final DpoLoss loss;
    private final TrainableModel<?> model;
    private final AdapterSwitch adapters;

    /**
     * @param adapters the model's adapter switch, or {@code null} for full fine-tuning (then every batch must carry
     *     precomputed reference values)
     */
    public DpoObjective(DpoLoss loss, TrainableModel<?> model, AdapterSwitch adapters) {
        this.loss = loss;
        this.model = model;
        this.adapters = adapters;
    }

    @Override
    public Loss loss(DpoBatch batch, ForwardPass forward, NDManager manager) {
        ModelInputs inputs = batch.rows().inputs(manager);
        NDArray reference;
        if (batch.reference() != null) {
            reference = manager.create(batch.reference());
        } else if (adapters != null) {
            reference = referenceLogProbs(model, adapters, batch.rows(), inputs, loss.type(), manager);
        } else {
            throw new IllegalStateException("full fine-tuning DPO needs reference values precomputed before training");
        }
        NDArray policy = sequenceLogProbs(forward.logits(inputs), batch.rows(), loss.type(), manager);
        int pairs = batch.pairs();
        NDIndex first = new NDIndex("0:" + pairs);
        NDIndex second = new NDIndex(pairs + ":");
        DpoLoss.Result result = loss.compute(policy.get(first), policy.get(second), reference.get(first),
                reference.get(second), manager);
        return new Loss(result.sum(), result.metrics());
    }

    /**
     * The reference values of every batch, computed now with the current weights (call it before training starts,
     * so they are the base model's; with an adapter, it is switched off) and attached to copies of the batches.
     */
    public static List<DpoBatch> precompute(TrainableModel<?> model, AdapterSwitch adapters, List<DpoBatch> batches,
            DpoLoss.Type type, NDManager manager) {
        List<DpoBatch> out = new ArrayList<>(batches.size());
        for (DpoBatch batch : batches) {
            try (NDScope scope = new NDScope()) {
                ModelInputs inputs = batch.rows().inputs(manager);
                out.add(batch.withReference(
                        referenceLogProbs(model, adapters, batch.rows(), inputs, type, manager).toFloatArray()));
            }
        }
        return out;
    }

    private static NDArray referenceLogProbs(TrainableModel<?> model, AdapterSwitch adapters, CompletionRows rows,
            ModelInputs inputs, DpoLoss.Type type, NDManager manager) {
        if (adapters == null) {
            return sequenceLogProbs(NoGradient.logits(model, inputs), rows, type, manager);
        }
        try (AdapterSwitch.Restore base = adapters.disabled()) {
            return sequenceLogProbs(NoGradient.logits(model, inputs), rows, type, manager);
        }
    }

    /** {@code [rows]}: Σ of the completion tokens' log-probabilities, or their mean for per-token losses. */
    static NDArray sequenceLogProbs(NDArray logits, CompletionRows rows, DpoLoss.Type type, NDManager manager) {
        NDArray sums = rows.tokenLogProbs(logits, manager).sum(new int[] {1});
        if (!type.perTokenMean()) {
            return sums;
        }
        float[] inverse = new float[rows.rows()];
        for (int r = 0; r < inverse.length; r++) {
            inverse[r] = 1f / Math.max(1, rows.completionLengths()[r]);
        }
        return sums.mul(manager.create(inverse, new Shape(inverse.length)));
    }
}
