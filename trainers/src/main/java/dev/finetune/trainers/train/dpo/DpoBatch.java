package dev.finetune.trainers.train.dpo;

import dev.finetune.trainers.data.PreferencePair;
import dev.finetune.trainers.train.Batch;
import dev.finetune.trainers.train.CompletionRows;
import java.util.ArrayList;
import java.util.List;

/**
 * A micro batch of preference pairs: one forward pass over {@code 2P} rows, the chosen completions first, then the
 * rejected ones in the same order.
 *
 * @param reference the reference model's sequence log-probabilities of the {@code 2P} rows, when they were
 *     computed before training (full fine-tuning); {@code null} when the reference runs alongside (LoRA)
 */
public record DpoBatch(CompletionRows rows, float[] reference) implements Batch {

    public DpoBatch {
        if (rows.rows() % 2 != 0) {
            throw new IllegalArgumentException("a DPO batch holds chosen and rejected rows in pairs");
        }
        if (reference != null && reference.length != rows.rows()) {
            throw new IllegalArgumentException(reference.length + " reference values for " + rows.rows() + " rows");
        }
    }

    public static DpoBatch of(List<PreferencePair> pairs, int padId) {
        List<long[]> prompts = new ArrayList<>();
        List<long[]> completions = new ArrayList<>();
        for (PreferencePair pair : pairs) {
            prompts.add(pair.prompt());
            completions.add(pair.chosen());
        }
        for (PreferencePair pair : pairs) {
            prompts.add(pair.prompt());
            completions.add(pair.rejected());
        }
        return new DpoBatch(CompletionRows.of(prompts, completions, padId), null);
    }

    public int pairs() {
        return rows.rows() / 2;
    }

    public DpoBatch withReference(float[] values) {
        return new DpoBatch(rows, values);
    }

    @Override
    public long tokenCount() {
        return rows.tokenCount();
    }

    @Override
    public long samples() {
        return pairs();
    }

    /** The loss is summed over pairs, so accumulation averages over every pair of the window. */
    @Override
    public long lossWeight() {
        return pairs();
    }
}
