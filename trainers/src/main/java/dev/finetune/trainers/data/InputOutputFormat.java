package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import dev.finetune.trainers.text.Tokenizer;
import java.util.ArrayList;
import java.util.List;

/**
 * {@code type: input_output}: {@code segments} of {@code {text, label}}; a segment is learned when its label is
 * true (or train_on_inputs is set). No BOS/EOS is added: as in Axolotl, the segments' text is the whole sequence.
 */
record InputOutputFormat(Tokenizer tokenizer, boolean trainOnInputs) implements RowFormat {
    private static final String HINT = "write \"segments\": [{\"text\": \"...\", \"label\": false}, {\"text\": \"...\", \"label\": true}]";

    @Override
    public List<Example> examples(JsonObject row) {
        JsonElement segments = row.get("segments");
        if (segments == null || segments.isJsonNull()) {
            throw new InvalidRow("missing field 'segments' (type input_output)", HINT);
        }
        if (!segments.isJsonArray()) {
            throw new InvalidRow("field 'segments' must be an array, found " + Fields.describe(segments), HINT);
        }
        List<int[]> ids = new ArrayList<>();
        List<Boolean> learned = new ArrayList<>();
        int total = 0;
        int index = 0;
        for (JsonElement element : (JsonArray) segments) {
            String where = "segments[" + index++ + "]";
            if (!element.isJsonObject()) {
                throw new InvalidRow(where + " must be an object, found " + Fields.describe(element), HINT);
            }
            JsonObject segment = element.getAsJsonObject();
            String text = Fields.requiredString(segment, "text", "input_output");
            JsonElement label = segment.get("label");
            if (label == null || !label.isJsonPrimitive() || !label.getAsJsonPrimitive().isBoolean()) {
                throw new InvalidRow(where + ".label must be true or false, found " + (label == null ? "nothing" : Fields.describe(label)), HINT);
            }
            int[] tokens = tokenizer.encode(text, false);
            ids.add(tokens);
            learned.add(label.getAsBoolean() || trainOnInputs);
            total += tokens.length;
        }
        int[] allIds = new int[total];
        int[] labels = new int[total];
        int at = 0;
        for (int s = 0; s < ids.size(); s++) {
            for (int token : ids.get(s)) {
                allIds[at] = token;
                labels[at++] = learned.get(s) ? token : Example.IGNORE;
            }
        }
        return List.of(new Example(allIds, labels));
    }
}
