package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.List;

/** No {@code type}: rows already hold {@code input_ids} and optionally {@code labels} (Axolotl's pre-tokenized form). */
record PretokenizedFormat() implements RowFormat {
    @Override
    public List<Example> examples(JsonObject row) {
        int[] ids = ints(row, "input_ids");
        int[] labels = row.has("labels") ? ints(row, "labels") : ids.clone();
        if (labels.length != ids.length) {
            throw new InvalidRow("'labels' has " + labels.length + " entries but 'input_ids' has " + ids.length,
                    "give one label per token, -100 where no loss is wanted");
        }
        return List.of(new Example(ids, labels));
    }

    private static int[] ints(JsonObject row, String field) {
        JsonElement value = row.get(field);
        if (value == null || value.isJsonNull()) {
            throw new InvalidRow("missing field '" + field + "' (no dataset type means pre-tokenized rows)",
                    "set the dataset's type (alpaca, chat_template, completion, input_output) or add input_ids");
        }
        if (!value.isJsonArray()) {
            throw new InvalidRow("field '" + field + "' must be an array of token ids, found " + Fields.describe(value), "write e.g. [1, 403, 407]");
        }
        JsonArray array = value.getAsJsonArray();
        int[] out = new int[array.size()];
        for (int i = 0; i < out.length; i++) {
            JsonElement id = array.get(i);
            if (!id.isJsonPrimitive() || !id.getAsJsonPrimitive().isNumber() || id.getAsDouble() != Math.rint(id.getAsDouble())
                    || id.getAsInt() < Example.IGNORE) {
                throw new InvalidRow(field + "[" + i + "] must be an integer, found " + Fields.describe(id), "write e.g. [1, 403, 407]");
            }
            out[i] = id.getAsInt();
        }
        return out;
    }
}
