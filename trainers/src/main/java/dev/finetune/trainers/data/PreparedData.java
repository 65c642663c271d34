package dev.finetune.trainers.data;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.stream.IntStream;

/**
 * Tokenized examples split into train and eval, and the batches they make. Every order derives from the seed
 * (and the epoch), so a resumed run sees exactly the batches the interrupted one would have.
 */
public final class PreparedData {
    private final List<Example> train;
    private final List<Example> eval;
    private final DataOptions options;
    private final int padId;
    private final DataReport report;

    PreparedData(List<Example> train, List<Example> eval, DataOptions options, int padId, DataReport report) {
        this.train = List.copyOf(train);
        this.eval = List.copyOf(eval);
        this.options = options;
        this.padId = padId;
        this.report = report;
    }

    public DataReport report() {
        return report;
    }

    public List<Example> train() {
        return train;
    }

    public List<Example> eval() {
        return eval;
    }

    /**
     * The epoch's micro batches: examples shuffled by seed and epoch, packed when sample_packing is on; under
     * curriculum_sampling in the data's order, packed in that order. A loop that permutes micro batches itself (the
     * Trainer does) takes epoch 0's list once.
     */
    public List<TokenBatch> trainBatches(int epoch, int microBatchSize) {
        List<Integer> order = new ArrayList<>(IntStream.range(0, train.size()).boxed().toList());
        if (options.selection().curriculum()) {
            return batches(train, rows(train, order), microBatchSize);
        }
        Random random = new Random(options.seed() * 1_000_003L + epoch);
        Collections.shuffle(order, random);
        List<int[]> rows = rows(train, order);
        if (options.samplePacking()) {
            Collections.shuffle(rows, random);
        }
        return batches(train, rows, microBatchSize);
    }

    /** Eval micro batches in a fixed order, packed like training when sample_packing is on (Axolotl's default). */
    public List<TokenBatch> evalBatches(int microBatchSize) {
        List<Integer> order = IntStream.range(0, eval.size()).boxed().toList();
        return batches(eval, rows(eval, order), microBatchSize);
    }

    /** Eval micro batches in a fixed order, packed when {@code packed} ({@code eval_sample_packing}). */
    public List<TokenBatch> evalBatches(int microBatchSize, boolean packed) {
        return packed == options.samplePacking() ? evalBatches(microBatchSize)
                : new PreparedData(List.of(), eval, options.withSamplePacking(packed), padId, report).evalBatches(microBatchSize);
    }

    /** Training sequences per epoch; the same for every epoch. */
    public int trainSequences() {
        return report.sequences();
    }

    private List<int[]> rows(List<Example> examples, List<Integer> order) {
        if (options.samplePacking()) {
            return new ArrayList<>(Packing.pack(lengths(examples), order, options.sequenceLen(), packsInOrder(options)));
        }
        List<int[]> rows = new ArrayList<>(order.size());
        for (int index : order) {
            rows.add(new int[] {index});
        }
        return rows;
    }

    /** Order-keeping packing: asked for, or implied by curriculum sampling (whose order best-fit would undo). */
    static boolean packsInOrder(DataOptions options) {
        return options.selection().packInOrder() || options.selection().curriculum();
    }

    static int[] lengths(List<Example> examples) {
        return examples.stream().mapToInt(Example::length).toArray();
    }

    private List<TokenBatch> batches(List<Example> examples, List<int[]> rows, int microBatchSize) {
        if (microBatchSize < 1) {
            throw new IllegalArgumentException("micro batch size must be positive, got " + microBatchSize);
        }
        List<TokenBatch> batches = new ArrayList<>();
        for (int from = 0; from < rows.size(); from += microBatchSize) {
            batches.add(batch(examples, rows.subList(from, Math.min(rows.size(), from + microBatchSize))));
        }
        return batches;
    }

    private TokenBatch batch(List<Example> examples, List<int[]> rows) {
        int length = options.samplePacking() ? options.sequenceLen() : 0;
        if (!options.samplePacking()) {
            for (int[] row : rows) {
                length = Math.max(length, examples.get(row[0]).length());
            }
        }
        long[][] ids = new long[rows.size()][length];
        long[][] labels = new long[rows.size()][length];
        long[][] positions = new long[rows.size()][length];
        long[][] segments = new long[rows.size()][length];
        long targets = 0;
        int count = 0;
        for (int r = 0; r < rows.size(); r++) {
            Arrays.fill(ids[r], padId);
            Arrays.fill(labels[r], Example.IGNORE);
            int at = 0;
            int segment = 0;
            for (int index : rows.get(r)) {
                Example example = examples.get(index);
                segment++;
                count++;
                int n = example.length();
                for (int t = 0; t < n; t++) {
                    ids[r][at + t] = example.inputIds()[t];
                    positions[r][at + t] = t;
                    segments[r][at + t] = segment;
                    // Position at+t-1 predicts this label; for t = 0 that is the previous example's last token.
                    labels[r][at + t] = t == 0 ? Example.IGNORE : example.labels()[t];
                }
                targets += example.targets();
                at += n;
            }
        }
        return new TokenBatch(ids, labels, positions, segments, targets, count);
    }
}
