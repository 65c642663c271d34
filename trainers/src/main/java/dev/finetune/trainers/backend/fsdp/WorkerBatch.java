package dev.finetune.trainers.backend.fsdp;

import dev.finetune.trainers.train.CompletionRows;
import dev.finetune.trainers.train.dpo.DpoBatch;
import dev.finetune.trainers.train.grpo.GrpoBatch;
import dev.finetune.trainers.train.sft.SftBatch;

/**
 * One micro batch as the worker reads it, row-major {@code [rows, columns]}: what the model sees (ids, positions,
 * segments) and what each position predicts ({@code targets}, counted where {@code mask} is 1). The JVM objectives'
 * batches map onto it one to one, so both backends train on the same numbers.
 *
 * @param weight the batch's loss units ({@link dev.finetune.trainers.train.Batch#lossWeight}): target tokens for SFT,
 *     pairs for DPO, completions for GRPO
 */
public record WorkerBatch(int rows, int columns, long[] ids, long[] positions, long[] segments, long[] targets,
        byte[] mask, long weight) {

    public WorkerBatch {
        int cells = Math.multiplyExact(rows, columns);
        if (ids.length != cells || positions.length != cells || segments.length != cells || targets.length != cells
                || mask.length != cells) {
            throw new IllegalArgumentException("every array of a " + rows + "x" + columns + " batch needs " + cells
                    + " entries");
        }
    }

    /** SFT: position t predicts {@code labels[t + 1]} where that label is not ignored (as SftObjective shifts). */
    public static WorkerBatch of(SftBatch batch) {
        SftBatch.Targets targets = batch.targets();
        byte[] mask = new byte[targets.weights().length];
        for (int i = 0; i < mask.length; i++) {
            mask[i] = (byte) (targets.weights()[i] != 0 ? 1 : 0);
        }
        return new WorkerBatch(batch.rows(), batch.columns(), batch.inputIds(), batch.positionIds(),
                batch.segmentIds(), targets.ids(), mask, batch.lossWeight());
    }

    /** DPO: the chosen rows then the rejected ones, completion tokens as targets (as DpoObjective scores them). */
    public static WorkerBatch of(DpoBatch batch) {
        CompletionRows rows = batch.rows();
        byte[] mask = new byte[rows.completionMask().length];
        for (int i = 0; i < mask.length; i++) {
            mask[i] = rows.completionMask()[i] != 0f ? (byte) 1 : 0;
        }
        return new WorkerBatch(rows.rows(), rows.columns(), rows.inputIds(), rows.positionIds(), rows.segmentIds(),
                rows.targets(), mask, batch.lossWeight());
    }

    /**
     * GRPO: each prompt once per completion to sample ({@code num_generations} rows in a row), left-aligned and
     * right-padded with {@code padId}; nothing to predict yet (the completions are sampled by the worker).
     */
    public static WorkerBatch of(GrpoBatch batch, int padId) {
        int generations = batch.numGenerations();
        int rows = batch.prompts().size() * generations;
        int columns = batch.prompts().stream().mapToInt(p -> p.ids().length).max().orElse(1);
        long[] ids = new long[rows * columns];
        long[] positions = new long[rows * columns];
        long[] segments = new long[rows * columns];
        java.util.Arrays.fill(ids, padId);
        for (int r = 0; r < rows; r++) {
            long[] prompt = batch.prompts().get(r / generations).ids();
            for (int t = 0; t < prompt.length; t++) {
                ids[r * columns + t] = prompt[t];
                positions[r * columns + t] = t;
                segments[r * columns + t] = 1;
            }
        }
        return new WorkerBatch(rows, columns, ids, positions, segments, new long[rows * columns],
                new byte[rows * columns], batch.lossWeight());
    }

    /** Real (non-padding) tokens. */
    public long tokens() {
        long count = 0;
        for (long segment : segments) {
            count += segment != 0 ? 1 : 0;
        }
        return count;
    }

    /** Positions with a target. */
    public long targetCount() {
        long count = 0;
        for (byte m : mask) {
            count += m;
        }
        return count;
    }
}
