package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import dev.finetune.trainers.text.Tokenizer;
import java.util.List;

/**
 * {@code type: alpaca}: {@code instruction}, optional {@code input}, {@code output}, in Axolotl's instruct prompt.
 * Like Axolotl, the prompt (with BOS) and the response (with EOS) are tokenized separately and joined.
 */
record AlpacaFormat(Tokenizer tokenizer, boolean trainOnInputs) implements RowFormat {
    static final String WITH_INPUT = "Below is an instruction that describes a task, paired with an input that provides"
            + " further context. Write a response that appropriately completes the request.\n\n"
            + "### Instruction:\n%s\n\n### Input:\n%s\n\n### Response:\n";
    static final String WITHOUT_INPUT = "Below is an instruction that describes a task. Write a response that"
            + " appropriately completes the request.\n\n### Instruction:\n%s\n\n### Response:\n";

    static String prompt(String instruction, String input) {
        return input.isEmpty() ? String.format(WITHOUT_INPUT, instruction) : String.format(WITH_INPUT, instruction, input);
    }

    @Override
    public List<Example> examples(JsonObject row) {
        String instruction = Fields.requiredString(row, "instruction", "alpaca");
        String input = Fields.optionalString(row, "input");
        String output = Fields.requiredString(row, "output", "alpaca");
        int[] prompt = tokenizer.encode(prompt(instruction, input), true);
        int[] response = withEos(output.isEmpty() ? new int[0] : tokenizer.encode(output, false), tokenizer);
        int[] ids = new int[prompt.length + response.length];
        int[] labels = new int[ids.length];
        System.arraycopy(prompt, 0, ids, 0, prompt.length);
        System.arraycopy(response, 0, ids, prompt.length, response.length);
        for (int t = 0; t < ids.length; t++) {
            labels[t] = t >= prompt.length || trainOnInputs ? ids[t] : Example.IGNORE;
        }
        return List.of(new Example(ids, labels));
    }

    /** Axolotl appends EOS unless the text already ends with it; an empty response stays empty. */
    static int[] withEos(int[] ids, Tokenizer tokenizer) {
        int eos = tokenizer.special().eosId();
        if (ids.length == 0 || eos < 0 || ids[ids.length - 1] == eos) {
            return ids;
        }
        int[] out = java.util.Arrays.copyOf(ids, ids.length + 1);
        out[ids.length] = eos;
        return out;
    }
}
