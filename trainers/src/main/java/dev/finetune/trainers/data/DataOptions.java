package dev.finetune.trainers.data;

import dev.finetune.recipes.Recipe.ExcessLength;
import dev.finetune.recipes.Recipe;

/**
 * The recipe's top-level data settings as the data code reads them, with Axolotl's meanings; a view of the
 * {@link Recipe}, never checked or defaulted again here.
 *
 * @param sequenceLen {@code sequence_len}: the most tokens one training sequence holds
 * @param trainOnInputs {@code train_on_inputs}: also learn the prompt tokens
 * @param samplePacking {@code sample_packing}: fill each sequence with several examples
 * @param valSetSize {@code val_set_size}: held-out share (below 1) or number of examples (1 or more); 0 for none
 * @param seed {@code seed}: fixes the split, the order and the packing
 * @param excessLength {@code excess_length_strategy}: what happens to an example longer than sequence_len
 * @param skipInvalidRows {@code dataset_skip_invalid_rows} (ours; Axolotl has no such key and fails on a broken
 *     row): count and skip rows that are not valid JSON or lack a field, instead of stopping
 * @param chatTemplate {@code chat_template}, or null for {@code tokenizer_default}
 * @param chatTemplateJinja {@code chat_template_jinja}: template text or file, or null
 */
public record DataOptions(
        int sequenceLen,
        boolean trainOnInputs,
        boolean samplePacking,
        double valSetSize,
        long seed,
        ExcessLength excessLength,
        boolean skipInvalidRows,
        String chatTemplate,
        String chatTemplateJinja) {

    /** The data settings a recipe holds; each was read and checked once, by the recipe reader. */
    public static DataOptions of(Recipe recipe) {
        return new DataOptions(recipe.training().sequenceLen(), recipe.data().trainOnInputs(),
                recipe.training().samplePacking(), recipe.data().valSetSize(), recipe.training().seed(),
                recipe.data().excessLength(), recipe.data().skipInvalidRows(), recipe.model().chatTemplate(),
                recipe.model().chatTemplateJinja());
    }

    public DataOptions withSequenceLen(int value) {
        return new DataOptions(value, trainOnInputs, samplePacking, valSetSize, seed, excessLength, skipInvalidRows, chatTemplate, chatTemplateJinja);
    }

    public DataOptions withTrainOnInputs(boolean value) {
        return new DataOptions(sequenceLen, value, samplePacking, valSetSize, seed, excessLength, skipInvalidRows, chatTemplate, chatTemplateJinja);
    }

    public DataOptions withSamplePacking(boolean value) {
        return new DataOptions(sequenceLen, trainOnInputs, value, valSetSize, seed, excessLength, skipInvalidRows, chatTemplate, chatTemplateJinja);
    }

    public DataOptions withValSetSize(double value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, value, seed, excessLength, skipInvalidRows, chatTemplate, chatTemplateJinja);
    }

    public DataOptions withSeed(long value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, value, excessLength, skipInvalidRows, chatTemplate, chatTemplateJinja);
    }

    public DataOptions withExcessLength(ExcessLength value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, seed, value, skipInvalidRows, chatTemplate, chatTemplateJinja);
    }

    public DataOptions withSkipInvalidRows(boolean value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, seed, excessLength, value, chatTemplate, chatTemplateJinja);
    }

    public DataOptions withChatTemplate(String choice, String jinja) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, seed, excessLength, skipInvalidRows, choice, jinja);
    }
}
