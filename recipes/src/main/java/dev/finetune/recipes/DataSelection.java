package dev.finetune.recipes;

/**
 * Which tokenized examples training sees and in what order, with Axolotl's keys and its order of operations:
 * the datasets are merged (each shuffled first with {@code shuffle_before_merging_datasets}, the merged rows shuffled
 * with {@code shuffle_merged_datasets}), examples shorter than {@code min_sample_len} tokens are dropped, exact
 * duplicates removed ({@code dataset_exact_deduplication}), one shard kept ({@code dataset_shard_num} /
 * {@code dataset_shard_idx}), and only then is the evaluation split drawn.
 *
 * @param minSampleLen {@code min_sample_len}: shorter examples are dropped (Axolotl's default 2)
 * @param shardCount {@code dataset_shard_num}, or 0 for no sharding
 * @param shardIndex {@code dataset_shard_idx}: the contiguous shard kept, as {@code datasets.Dataset.shard} cuts it
 * @param exactDeduplication {@code dataset_exact_deduplication}: a row whose tokens and labels equal an earlier
 *     row's is dropped
 * @param shuffleBeforeMerging {@code shuffle_before_merging_datasets}
 * @param shuffleMerged {@code shuffle_merged_datasets} (Axolotl's default true; false under curriculum sampling
 *     unless written)
 * @param curriculum {@code curriculum_sampling}: training visits the examples in the data's order, every epoch,
 *     instead of a seeded shuffle per epoch
 * @param packInOrder {@code sample_packing_sequentially}: packing fills sequences in the examples' order (next fit)
 *     instead of best-fit by length; curriculum sampling implies it
 */
public record DataSelection(
        int minSampleLen,
        int shardCount,
        int shardIndex,
        boolean exactDeduplication,
        boolean shuffleBeforeMerging,
        boolean shuffleMerged,
        boolean curriculum,
        boolean packInOrder) {

    /** Axolotl's defaults: what a recipe that writes none of these keys gets. */
    public static final DataSelection DEFAULTS = new DataSelection(2, 0, 0, false, false, true, false, false);

    public boolean sharded() {
        return shardCount > 0;
    }
}
