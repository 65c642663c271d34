package dev.finetune.trainers.data;

import dev.finetune.recipes.DataSelection;
import dev.finetune.recipes.UserError;
import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.function.Function;
import java.util.stream.IntStream;

/**
 * {@link DataSelection} over rows already tokenized, in Axolotl's order: merge the datasets (each shuffled first when
 * asked), put the merged rows in their order (shuffled by the seed unless {@code shuffle_merged_datasets: false}),
 * drop exact duplicates, keep one contiguous shard of that order, then hold out the evaluation rows: a seeded draw,
 * or the last rows of the order when it is not shuffled (Axolotl's {@code train_test_split(shuffle=False)}).
 *
 * <p>Training rows come back in the files' order, which the trainer shuffles every epoch; under
 * {@code curriculum_sampling} in the merged order, which it keeps.
 */
final class RowSelection {
    private RowSelection() {}

    /**
     * @param duplicates rows dropped as exact repeats of an earlier row
     * @param outsideShard rows left out because they belong to another shard
     */
    record Result<T>(List<T> train, List<T> eval, int duplicates, int outsideShard) {}

    /**
     * @param perDataset each dataset's rows in file order
     * @param identity what makes two rows the same for {@code dataset_exact_deduplication}: their token arrays
     */
    static <T> Result<T> apply(List<List<T>> perDataset, DataSelection selection, double valSetSize, long seed,
            Function<T, List<long[]>> identity) {
        List<T> rows = new ArrayList<>();
        List<Integer> order = new ArrayList<>();
        for (List<T> dataset : perDataset) {
            List<Integer> indices = new ArrayList<>(IntStream.range(rows.size(), rows.size() + dataset.size()).boxed().toList());
            if (selection.shuffleBeforeMerging()) {
                Collections.shuffle(indices, new Random(seed));
            }
            order.addAll(indices);
            rows.addAll(dataset);
        }
        if (selection.shuffleMerged()) {
            Collections.shuffle(order, new Random(seed));
        }
        int duplicates = 0;
        if (selection.exactDeduplication()) {
            Set<String> seen = new HashSet<>();
            List<Integer> unique = new ArrayList<>(order.size());
            for (int index : order) {
                if (seen.add(digest(identity.apply(rows.get(index))))) {
                    unique.add(index);
                }
            }
            duplicates = order.size() - unique.size();
            order = unique;
        }
        int outsideShard = 0;
        if (selection.sharded()) {
            // datasets.Dataset.shard(num_shards, index, contiguous=True): the first (n mod shards) shards hold one more
            int n = order.size();
            int size = n / selection.shardCount();
            int extra = n % selection.shardCount();
            int from = size * selection.shardIndex() + Math.min(selection.shardIndex(), extra);
            int to = from + size + (selection.shardIndex() < extra ? 1 : 0);
            outsideShard = n - (to - from);
            order = new ArrayList<>(order.subList(from, to));
        }
        if (order.isEmpty()) {
            return new Result<>(List.of(), List.of(), duplicates, outsideShard);
        }
        Set<Integer> held = heldOut(order, selection.shuffleMerged(), valSetSize, seed);
        List<Integer> trainOrder = new ArrayList<>(order);
        if (!selection.curriculum()) {
            Collections.sort(trainOrder);
        }
        List<T> train = new ArrayList<>();
        for (int index : trainOrder) {
            if (!held.contains(index)) {
                train.add(rows.get(index));
            }
        }
        List<Integer> evalOrder = new ArrayList<>(held);
        Collections.sort(evalOrder);
        List<T> eval = evalOrder.stream().map(rows::get).toList();
        return new Result<>(train, eval, duplicates, outsideShard);
    }

    /**
     * Which rows {@code val_set_size} holds out: ceil(fraction × rows) rows, or the given count; a seeded draw over
     * the kept rows in file order, or the last ones of an unshuffled order.
     */
    private static Set<Integer> heldOut(List<Integer> order, boolean shuffled, double size, long seed) {
        if (size == 0) {
            return Set.of();
        }
        int rows = order.size();
        int count = size < 1 ? (int) Math.ceil(size * rows) : (int) size;
        if (count >= rows) {
            throw new UserError("val_set_size", "val_set_size " + (size < 1 ? size : (int) size) + " holds out " + count
                    + " of " + rows + " usable rows, leaving nothing to train on", "lower val_set_size or add data");
        }
        if (!shuffled) {
            return new HashSet<>(order.subList(rows - count, rows));
        }
        List<Integer> fileOrder = new ArrayList<>(order);
        Collections.sort(fileOrder);
        List<Integer> draw = new ArrayList<>(IntStream.range(0, rows).boxed().toList());
        Collections.shuffle(draw, new Random(seed));
        Set<Integer> held = new HashSet<>();
        for (int i : draw.subList(0, count)) {
            held.add(fileOrder.get(i));
        }
        return held;
    }

    /** A SHA-256 of the arrays: rows are compared by it, so the check holds no copy of the data. */
    private static String digest(List<long[]> arrays) {
        try {
            MessageDigest digest = MessageDigest.getInstance("SHA-256");
            ByteBuffer buffer = ByteBuffer.allocate(8);
            for (long[] array : arrays) {
                buffer.clear();
                digest.update(buffer.putLong(0, array.length).array());
                for (long v : array) {
                    digest.update(buffer.putLong(0, v).array());
                }
            }
            return java.util.HexFormat.of().formatHex(digest.digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
    }
}
