package dev.finetune.trainers.data;

import dev.finetune.recipes.DataSelection;
import dev.finetune.recipes.Recipe.ExcessLength;
import dev.finetune.recipes.Recipe;
import java.util.List;
import java.util.Map;

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
 * @param templates the recipe-wide chat template settings
 * @param selection which examples are kept and in what order
 */
public record DataOptions(
        int sequenceLen,
        boolean trainOnInputs,
        boolean samplePacking,
        double valSetSize,
        long seed,
        ExcessLength excessLength,
        boolean skipInvalidRows,
        Templates templates,
        DataSelection selection) {

    /**
     * @param choice {@code chat_template}, or null for {@code tokenizer_default}
     * @param jinja {@code chat_template_jinja}: template text or file, or null
     * @param variables {@code chat_template_kwargs}: what every rendering sees besides the messages
     * @param defaultSystemMessage {@code default_system_message}: the system turn of a conversation without one, or null
     * @param eotTokens {@code eot_tokens}: the tokens that end a turn; empty means the EOS token
     */
    public record Templates(String choice, String jinja, Map<String, Object> variables, String defaultSystemMessage,
            List<String> eotTokens) {
        public static final Templates NONE = new Templates(null, null, Map.of(), null, List.of());
    }

    /** The data settings a recipe holds; each was read and checked once, by the recipe reader. */
    public static DataOptions of(Recipe recipe) {
        Recipe.Model model = recipe.model();
        return new DataOptions(recipe.training().sequenceLen(), recipe.data().trainOnInputs(),
                recipe.training().samplePacking(), recipe.data().valSetSize(), recipe.training().seed(),
                recipe.data().excessLength(), recipe.data().skipInvalidRows(),
                new Templates(model.chatTemplate(), model.chatTemplateJinja(), model.chatTemplateKwargs(),
                        model.defaultSystemMessage(), model.eotTokens()),
                recipe.data().selection());
    }

    /** {@code chat_template}, or null for {@code tokenizer_default}. */
    public String chatTemplate() {
        return templates.choice();
    }

    /** {@code chat_template_jinja}: template text or file, or null. */
    public String chatTemplateJinja() {
        return templates.jinja();
    }

    public DataOptions withSequenceLen(int value) {
        return new DataOptions(value, trainOnInputs, samplePacking, valSetSize, seed, excessLength, skipInvalidRows, templates, selection);
    }

    public DataOptions withTrainOnInputs(boolean value) {
        return new DataOptions(sequenceLen, value, samplePacking, valSetSize, seed, excessLength, skipInvalidRows, templates, selection);
    }

    public DataOptions withSamplePacking(boolean value) {
        return new DataOptions(sequenceLen, trainOnInputs, value, valSetSize, seed, excessLength, skipInvalidRows, templates, selection);
    }

    public DataOptions withValSetSize(double value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, value, seed, excessLength, skipInvalidRows, templates, selection);
    }

    public DataOptions withSeed(long value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, value, excessLength, skipInvalidRows, templates, selection);
    }

    public DataOptions withExcessLength(ExcessLength value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, seed, value, skipInvalidRows, templates, selection);
    }

    public DataOptions withSkipInvalidRows(boolean value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, seed, excessLength, value, templates, selection);
    }

    public DataOptions withChatTemplate(String choice, String jinja) {
        return withTemplates(new Templates(choice, jinja, templates.variables(), templates.defaultSystemMessage(),
                templates.eotTokens()));
    }

    public DataOptions withTemplates(Templates value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, seed, excessLength, skipInvalidRows, value, selection);
    }

    public DataOptions withSelection(DataSelection value) {
        return new DataOptions(sequenceLen, trainOnInputs, samplePacking, valSetSize, seed, excessLength, skipInvalidRows, templates, value);
    }
}
