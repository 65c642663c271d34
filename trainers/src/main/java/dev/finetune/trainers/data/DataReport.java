package dev.finetune.trainers.data;

import dev.finetune.recipes.Recipe.ExcessLength;
import java.util.List;
import java.util.Locale;

/**
 * What the data will teach, printed before training.
 *
 * @param datasets one line per recipe dataset
 * @param trainExamples examples left for training after the split and the drops
 * @param evalExamples examples held out by val_set_size
 * @param trainTokens tokens in the training examples
 * @param trainTargets of those, tokens that carry loss
 * @param sequenceLen the recipe's sequence_len
 * @param excessLength what was done with longer examples
 * @param tooLong examples longer than sequence_len (truncated or dropped per {@code excessLength})
 * @param untrained examples dropped because no token of theirs carries loss
 * @param skippedRows invalid rows skipped (only with dataset_skip_invalid_rows)
 * @param skippedAt where the first skipped rows are
 * @param sequences training sequences per epoch (packed rows with sample_packing, else examples)
 * @param packingEfficiency share of the packed sequences' tokens that are real, or NaN without packing
 * @param notes warnings about the data that do not stop training
 */
public record DataReport(
        List<DatasetLine> datasets,
        int trainExamples,
        int evalExamples,
        long trainTokens,
        long trainTargets,
        int sequenceLen,
        ExcessLength excessLength,
        int tooLong,
        int untrained,
        int skippedRows,
        List<String> skippedAt,
        int sequences,
        double packingEfficiency,
        List<String> notes) {

    /** One dataset: its location in the recipe, path and type, rows read, examples made, rows skipped. */
    public record DatasetLine(String path, String type, int rows, int examples, int skippedRows) {}

    public double trainedShare() {
        return trainTokens == 0 ? 0 : (double) trainTargets / trainTokens;
    }

    /** Lines for the terminal, in the order a user checks them. */
    public String describe() {
        StringBuilder out = new StringBuilder();
        out.append(String.format(Locale.ROOT, "data: %d train / %d eval examples from %d dataset%s%n",
                trainExamples, evalExamples, datasets.size(), datasets.size() == 1 ? "" : "s"));
        for (DatasetLine line : datasets) {
            out.append(String.format(Locale.ROOT, "  %s (%s): %d rows -> %d examples%s%n", line.path(), line.type(), line.rows(),
                    line.examples(), line.skippedRows() > 0 ? ", " + line.skippedRows() + " invalid rows skipped" : ""));
        }
        out.append(String.format(Locale.ROOT, "  tokens: %,d, trained on %,d (%.1f%%)%n", trainTokens, trainTargets, 100 * trainedShare()));
        if (tooLong > 0) {
            String what = switch (excessLength) {
                case TRUNCATE -> "truncated";
                case DROP -> "dropped (excess_length_strategy: drop; truncate keeps them)";
                case RAISE -> "refused";
            };
            out.append(String.format(Locale.ROOT, "  longer than sequence_len %d: %d examples %s%n", sequenceLen, tooLong, what));
        }
        if (untrained > 0) {
            out.append(String.format(Locale.ROOT, "  no token to learn: %d examples dropped%n", untrained));
        }
        if (skippedRows > 0) {
            out.append(String.format(Locale.ROOT, "  invalid rows skipped: %d (first at %s)%n", skippedRows, String.join(", ", skippedAt)));
        }
        if (!Double.isNaN(packingEfficiency)) {
            out.append(String.format(Locale.ROOT, "  packing: %d examples in %d sequences of %d tokens, %.1f%% filled%n",
                    trainExamples, sequences, sequenceLen, 100 * packingEfficiency));
        }
        for (String note : notes) {
            out.append("  note: ").append(note).append(System.lineSeparator());
        }
        return out.toString();
    }
}
