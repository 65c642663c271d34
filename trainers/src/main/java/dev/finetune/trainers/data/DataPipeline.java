package dev.finetune.trainers.data;

import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.text.Tokenizer;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.IntStream;

/**
 * Recipe datasets in, tokenized and labelled examples out: reads every row, applies the dataset type, handles
 * over-long and invalid rows, holds out the validation split, and reports what it did.
 */
public final class DataPipeline {
    private static final int SKIPPED_LOCATIONS_SHOWN = 5;

    private DataPipeline() {}

    public static PreparedData prepare(List<DatasetSpec> specs, DataOptions options, Tokenizer tokenizer) {
        if (specs.isEmpty()) {
            throw new UserError("datasets", "the recipe lists no datasets", "add datasets: [{path: data.jsonl, type: alpaca}]");
        }
        Run run = new Run(options);
        List<DataReport.DatasetLine> lines = new ArrayList<>();
        List<String> notes = new ArrayList<>();
        List<List<List<Example>>> perDataset = new ArrayList<>();
        for (DatasetSpec spec : specs) {
            RowFormat format = RowFormat.of(spec, options, tokenizer);
            if (format.note() != null) {
                notes.add((spec.local() ? spec.path().getFileName().toString() : spec.remote()) + ": " + format.note());
            }
            int rowsBefore = run.rows;
            int skippedBefore = run.skipped;
            run.groups = new ArrayList<>();
            Rows.read(spec, row -> run.add(row, format));
            perDataset.add(run.groups);
            lines.add(new DataReport.DatasetLine(label(spec), spec.type() == null ? "pre-tokenized" : spec.type().key(),
                    run.rows - rowsBefore, run.groups.stream().mapToInt(List::size).sum(), run.skipped - skippedBefore));
        }
        if (perDataset.stream().allMatch(List::isEmpty)) {
            throw new UserError(specs.get(0).where(), "the datasets hold no usable example (" + run.rows + " rows read"
                    + (run.untrained > 0 ? ", " + run.untrained + " with no token to learn" : "")
                    + (run.tooLong > 0 ? ", " + run.tooLong + " longer than sequence_len " + options.sequenceLen() : "")
                    + (run.tooShort > 0 ? ", " + run.tooShort + " shorter than min_sample_len "
                            + options.selection().minSampleLen() : "") + ")",
                    run.untrained > 0 ? "no token carries loss: check roles_to_train (and roles, for the dataset's own "
                            + "role names) or train_on_inputs"
                            : "check the rows' fields against the dataset type, and that sequence_len leaves room for them");
        }

        RowSelection.Result<List<Example>> selected = RowSelection.apply(perDataset, options.selection(),
                options.valSetSize(), options.seed(), DataPipeline::identity);
        if (selected.train().isEmpty()) {
            throw new UserError("dataset_shard_idx", "shard " + options.selection().shardIndex() + " of "
                    + options.selection().shardCount() + " holds no example", "use fewer shards (dataset_shard_num)");
        }
        List<Example> train = new ArrayList<>();
        List<Example> eval = new ArrayList<>();
        selected.train().forEach(train::addAll);
        selected.eval().forEach(eval::addAll);

        long tokens = train.stream().mapToLong(Example::length).sum();
        long targets = train.stream().mapToLong(Example::targets).sum();
        int sequences = train.size();
        double efficiency = Double.NaN;
        if (options.samplePacking()) {
            sequences = Packing.pack(PreparedData.lengths(train), IntStream.range(0, train.size()).boxed().toList(),
                    options.sequenceLen(), PreparedData.packsInOrder(options)).size();
            efficiency = (double) tokens / ((long) sequences * options.sequenceLen());
        }
        if (run.tooShort > 0) {
            notes.add(run.tooShort + " examples shorter than min_sample_len " + options.selection().minSampleLen() + " dropped");
        }
        if (selected.duplicates() > 0) {
            notes.add(selected.duplicates() + " rows dropped as exact duplicates (dataset_exact_deduplication)");
        }
        if (options.selection().sharded()) {
            notes.add("shard " + options.selection().shardIndex() + " of " + options.selection().shardCount() + " kept, "
                    + selected.outsideShard() + " rows of the other shards left out");
        }
        DataReport report = new DataReport(lines, train.size(), eval.size(), tokens, targets, options.sequenceLen(),
                options.excessLength(), run.tooLong, run.untrained, run.skipped, run.skippedAt, sequences, efficiency, notes);
        Tokenizer.SpecialTokens special = tokenizer.special();
        int padId = special.padId() >= 0 ? special.padId() : Math.max(special.eosId(), 0);
        return new PreparedData(train, eval, options, padId, report);
    }

    /** The dataset as the report names it: its local path, or {@code id (split)} for a hub dataset. */
    static String label(DatasetSpec spec) {
        return spec.local() ? spec.path().toString() : spec.remote() + (spec.source().name() == null ? ""
                : " " + spec.source().name()) + " (" + spec.split() + ")";
    }

    /** A row's tokens and labels, what exact deduplication compares. */
    private static List<long[]> identity(List<Example> group) {
        List<long[]> arrays = new ArrayList<>();
        for (Example example : group) {
            arrays.add(java.util.Arrays.stream(example.inputIds()).asLongStream().toArray());
            arrays.add(java.util.Arrays.stream(example.labels()).asLongStream().toArray());
        }
        return arrays;
    }

    /** Counters and examples while rows stream in; rows stay grouped so the split never separates a row's chunks. */
    private static final class Run {
        final DataOptions options;
        /** The current dataset's rows, each the examples it made. */
        List<List<Example>> groups = new ArrayList<>();
        final List<String> skippedAt = new ArrayList<>();
        int rows;
        int skipped;
        int tooLong;
        int tooShort;
        int untrained;

        Run(DataOptions options) {
            this.options = options;
        }

        void add(JsonRows.Row row, RowFormat format) {
            rows++;
            List<Example> made;
            try {
                if (row.problem() != null) {
                    throw row.problem();
                }
                made = format.examples(row.value());
            } catch (dev.finetune.trainers.text.Tokenizer.Untokenizable untokenizable) {
                // the text's own file and line, never just "text" (no skipping: a wrong tokenizer fails every row)
                throw new UserError(row.location() + (untokenizable.where().equals("text") ? ""
                        : " (" + untokenizable.where() + ")"), untokenizable.getMessage(), untokenizable.hint());
            } catch (InvalidRow invalid) {
                if (!options.skipInvalidRows()) {
                    throw new UserError(row.location(), invalid.getMessage(),
                            invalid.hint() + " (or set dataset_skip_invalid_rows: true to skip such rows)");
                }
                skipped++;
                if (skippedAt.size() < SKIPPED_LOCATIONS_SHOWN) {
                    skippedAt.add(row.location());
                }
                return;
            }
            List<Example> kept = new ArrayList<>(made.size());
            for (Example example : made) {
                if (example.length() > options.sequenceLen()) {
                    tooLong++;
                    switch (options.excessLength()) {
                        case DROP -> {
                            continue;
                        }
                        case TRUNCATE -> example = example.truncated(options.sequenceLen());
                        case RAISE -> throw new UserError(row.location(), "the example has " + example.length()
                                + " tokens, more than sequence_len " + options.sequenceLen(),
                                "raise sequence_len, or set excess_length_strategy: truncate or drop");
                    }
                }
                if (example.length() < options.selection().minSampleLen()) {
                    tooShort++;
                    continue;
                }
                if (example.targets() == 0) {
                    untrained++;
                    continue;
                }
                kept.add(example);
            }
            if (!kept.isEmpty()) {
                groups.add(kept);
            }
        }
    }
}
