package dev.finetune.trainers.data;

import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.text.Tokenizer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
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
        for (DatasetSpec spec : specs) {
            requireLocalTrainSplit(spec);
            RowFormat format = RowFormat.of(spec, options, tokenizer);
            if (format.note() != null) {
                notes.add(spec.path().getFileName() + ": " + format.note());
            }
            int rowsBefore = run.rows;
            int examplesBefore = run.examples();
            int skippedBefore = run.skipped;
            for (Path file : JsonRows.files(spec.path(), spec.where())) {
                JsonRows.read(file, row -> run.add(row, format));
            }
            lines.add(new DataReport.DatasetLine(spec.path().toString(), spec.type() == null ? "pre-tokenized" : spec.type().key(),
                    run.rows - rowsBefore, run.examples() - examplesBefore, run.skipped - skippedBefore));
        }
        if (run.groups.isEmpty()) {
            throw new UserError(specs.get(0).where(), "the datasets hold no usable example (" + run.rows + " rows read)",
                    "check the rows' fields against the dataset type, and that sequence_len leaves room for them");
        }

        Set<Integer> held = heldOut(run.groups.size(), options);
        List<Example> train = new ArrayList<>();
        List<Example> eval = new ArrayList<>();
        for (int g = 0; g < run.groups.size(); g++) {
            (held.contains(g) ? eval : train).addAll(run.groups.get(g));
        }

        long tokens = train.stream().mapToLong(Example::length).sum();
        long targets = train.stream().mapToLong(Example::targets).sum();
        int sequences = train.size();
        double efficiency = Double.NaN;
        if (options.samplePacking()) {
            sequences = Packing.pack(PreparedData.lengths(train), IntStream.range(0, train.size()).boxed().toList(),
                    options.sequenceLen()).size();
            efficiency = (double) tokens / ((long) sequences * options.sequenceLen());
        }
        DataReport report = new DataReport(lines, train.size(), eval.size(), tokens, targets, options.sequenceLen(),
                options.excessLength(), run.tooLong, run.untrained, run.skipped, run.skippedAt, sequences, efficiency, notes);
        Tokenizer.SpecialTokens special = tokenizer.special();
        int padId = special.padId() >= 0 ? special.padId() : Math.max(special.eosId(), 0);
        return new PreparedData(train, eval, options, padId, report);
    }

    /** Only local files are read here; a hub dataset has to be downloaded first, and local JSON has one split. */
    private static void requireLocalTrainSplit(DatasetSpec spec) {
        if (!spec.local()) {
            throw new UserError(spec.where(), "dataset " + spec.remote() + " is not a local file; this trainer reads local"
                    + " JSON Lines and JSON files only", "download it (e.g. as JSON Lines) and set path: to the file");
        }
        if (spec.split() != null && !spec.split().equals("train")) {
            throw new UserError(spec.where(), "split: " + spec.split() + " does not exist in a local JSON file, whose rows"
                    + " all form the train split", "remove split:, or point path: at the file holding those rows");
        }
    }

    /** Which rows val_set_size holds out: a seeded draw of ceil(fraction × rows) rows, or the given count. */
    private static Set<Integer> heldOut(int rows, DataOptions options) {
        double size = options.valSetSize();
        if (size == 0) {
            return Set.of();
        }
        int count = size < 1 ? (int) Math.ceil(size * rows) : (int) size;
        if (count >= rows) {
            throw new UserError("val_set_size", "val_set_size " + (size < 1 ? size : (int) size) + " holds out " + count
                    + " of " + rows + " usable rows, leaving nothing to train on", "lower val_set_size or add data");
        }
        List<Integer> order = new ArrayList<>(IntStream.range(0, rows).boxed().toList());
        Collections.shuffle(order, new Random(options.seed()));
        return new HashSet<>(order.subList(0, count));
    }

    /** Counters and examples while rows stream in; rows stay grouped so the split never separates a row's chunks. */
    private static final class Run {
        final DataOptions options;
        final List<List<Example>> groups = new ArrayList<>();
        final List<String> skippedAt = new ArrayList<>();
        int rows;
        int skipped;
        int tooLong;
        int untrained;

        Run(DataOptions options) {
            this.options = options;
        }

        int examples() {
            return groups.stream().mapToInt(List::size).sum();
        }

        void add(JsonRows.Row row, RowFormat format) {
            rows++;
            List<Example> made;
            try {
                if (row.problem() != null) {
                    throw row.problem();
                }
                made = format.examples(row.value());
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
