package dev.finetune.trainers.train.dpo;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.trainers.train.CompletionRows;
import dev.finetune.trainers.train.ForwardPass;
import dev.finetune.trainers.train.ModelInputs;
import dev.finetune.trainers.train.NoGradient;
import dev.finetune.trainers.train.Objective;
import dev.finetune.trainers.train.TrainableModel;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

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
            reference = referenceLogProbs(model, adapters, batch.rows(), inputs, manager);
        } else {
            throw new IllegalStateException("full fine-tuning DPO needs reference values precomputed before training");
        }
        CompletionRows.Scored scored = batch.rows().score(forward, inputs, manager);
        NDArray policy = scored.logProbs().sum(new int[] {1});
        DpoLoss.Result result = loss.compute(policy, reference, batch.rows().completionLengths(), manager);
        Map<String, Double> metrics = new LinkedHashMap<>(result.metrics());
        metrics.putAll(tokenMetrics(batch.rows(), batch.pairs(), scored.stats()));
        return new Loss(result.sum(), metrics);
    }

    /**
     * TRL's token-level metrics of a batch: {@code entropy} over every completion token, {@code logits/chosen} and
     * {@code logits/rejected} (the mean logit over the vocabulary, averaged over each side's completion tokens),
     * and {@code mean_token_accuracy} over the chosen completions.
     */
    static Map<String, Double> tokenMetrics(CompletionRows rows, int pairs, CompletionRows.Stats stats) {
        double entropy = 0;
        double[] logits = new double[2];
        long[] tokens = new long[2];
        long correct = 0;
        for (int r = 0; r < rows.rows(); r++) {
            int side = r < pairs ? 0 : 1;
            entropy += stats.entropy()[r];
            logits[side] += stats.meanLogit()[r];
            tokens[side] += rows.completionLengths()[r];
            correct += side == 0 ? stats.correct()[r] : 0;
        }
        Map<String, Double> metrics = new LinkedHashMap<>();
        long all = tokens[0] + tokens[1];
        metrics.put("entropy", all > 0 ? entropy / all : 0.0);
        metrics.put("logits/chosen", tokens[0] > 0 ? logits[0] / tokens[0] : 0.0);
        metrics.put("logits/rejected", tokens[1] > 0 ? logits[1] / tokens[1] : 0.0);
        metrics.put("mean_token_accuracy", tokens[0] > 0 ? (double) correct / tokens[0] : 0.0);
        return metrics;
    }

    /**
     * The reference values of every batch, computed now with the current weights (call it before training starts,
     * so they are the base model's; with an adapter, it is switched off) and attached to copies of the batches.
     */
    public static List<DpoBatch> precompute(TrainableModel<?> model, AdapterSwitch adapters, List<DpoBatch> batches,
            NDManager manager) {
        List<DpoBatch> out = new ArrayList<>(batches.size());
        for (DpoBatch batch : batches) {
            try (NDScope scope = new NDScope()) {
                ModelInputs inputs = batch.rows().inputs(manager);
                out.add(batch.withReference(
                        referenceLogProbs(model, adapters, batch.rows(), inputs, manager).toFloatArray()));
            }
        }
        return out;
    }

    private static NDArray referenceLogProbs(TrainableModel<?> model, AdapterSwitch adapters, CompletionRows rows,
            ModelInputs inputs, NDManager manager) {
        if (adapters == null) {
            return sequenceLogProbs(NoGradient.logits(model, inputs), rows, manager);
        }
        try (AdapterSwitch.Restore frozen = adapters.reference()) {
            return sequenceLogProbs(NoGradient.logits(model, inputs), rows, manager);
        }
    }

    /** {@code [rows]}: Σ of the completion tokens' log-probabilities (TRL sums; per-token losses divide later). */
    static NDArray sequenceLogProbs(NDArray logits, CompletionRows rows, NDManager manager) {
        return rows.tokenLogProbs(logits, manager).sum(new int[] {1});
    }
}
