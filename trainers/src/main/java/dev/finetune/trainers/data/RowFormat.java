package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.text.Tokenizer;
import java.util.List;

/** How one row of a dataset {@code type} becomes token ids and labels, following Axolotl's prompt strategies. */
sealed interface RowFormat permits AlpacaFormat, ChatTemplateFormat, CompletionFormat, InputOutputFormat, PretokenizedFormat {
    List<String> TYPES = List.of("alpaca", "chat_template", "completion", "input_output");

    /** Usually one example; {@code completion} splits a long text into several. */
    List<Example> examples(JsonObject row);

    /** Something the user should know about this dataset before training (e.g. an untrained turn end), or null. */
    default String note() {
        return null;
    }

    static RowFormat of(DatasetSpec spec, DataOptions options, Tokenizer tokenizer) {
        String type = spec.type() == null ? "" : spec.type().strip();
        return switch (type) {
            case "" -> new PretokenizedFormat();
            case "alpaca" -> new AlpacaFormat(tokenizer, options.trainOnInputs());
            case "chat_template" -> new ChatTemplateFormat(spec, options, tokenizer);
            case "completion" -> new CompletionFormat(tokenizer, spec.field(), options.sequenceLen());
            case "input_output" -> new InputOutputFormat(tokenizer, options.trainOnInputs());
            default -> throw new UserError(spec.where(), "dataset type '" + type + "' is not supported for supervised fine-tuning",
                    type.startsWith("sharegpt") ? "Axolotl removed sharegpt; use type: chat_template"
                            : "use one of " + String.join(", ", TYPES) + ", or leave type empty for pre-tokenized rows");
        };
    }
}
