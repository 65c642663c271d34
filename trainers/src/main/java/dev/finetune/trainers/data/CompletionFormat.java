package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import dev.finetune.trainers.text.Tokenizer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * {@code type: completion}: raw text from {@code datasets[].field} (its default is the key table's), every token learned. As in Axolotl,
 * BOS and EOS frame the text and a text longer than sequence_len becomes several examples instead of being cut.
 */
record CompletionFormat(Tokenizer tokenizer, String field, int sequenceLen) implements RowFormat {

    @Override
    public List<Example> examples(JsonObject row) {
        String text = Fields.requiredString(row, field, "completion");
        if (text.isEmpty()) {
            return List.of();
        }
        int[] ids = AlpacaFormat.withEos(tokenizer.encode(text, true), tokenizer);
        List<Example> chunks = new ArrayList<>();
        for (int start = 0; start < ids.length; start += sequenceLen) {
            int[] chunk = Arrays.copyOfRange(ids, start, Math.min(ids.length, start + sequenceLen));
            chunks.add(new Example(chunk, chunk.clone()));
        }
        return chunks;
    }
}
