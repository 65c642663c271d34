package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.text.Tokenizer;
import java.util.List;

/** How one row of a dataset {@code type} becomes token ids and labels, following Axolotl's prompt strategies. */
sealed interface RowFormat permits AlpacaFormat, ChatTemplateFormat, CompletionFormat, InputOutputFormat, PretokenizedFormat {

    /** Usually one example; {@code completion} splits a long text into several. */
    List<Example> examples(JsonObject row);

    /** Something the user should know about this dataset before training (e.g. an untrained turn end), or null. */
    default String note() {
        return null;
    }

    /** The recipe reader lets only the types supervised fine-tuning reads reach here ({@link DatasetType}). */
    static RowFormat of(DatasetSpec spec, DataOptions options, Tokenizer tokenizer) {
        if (spec.type() == null) {
            return new PretokenizedFormat();
        }
        return switch (spec.type()) {
            case ALPACA -> new AlpacaFormat(tokenizer, options.trainOnInputs());
            case CHAT_TEMPLATE -> new ChatTemplateFormat(spec, options, tokenizer);
            case COMPLETION -> new CompletionFormat(tokenizer, spec.field(), options.sequenceLen());
            case INPUT_OUTPUT -> new InputOutputFormat(tokenizer, options.trainOnInputs());
            default -> throw new UserError(spec.where(), "dataset type '" + spec.type().key()
                    + "' is not supported for supervised fine-tuning", "use one of "
                    + String.join(", ", DatasetType.keysReadBy("sft")) + ", or leave type empty for pre-tokenized rows");
        };
    }
}
