package dev.finetune.cli;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Made-up rows in the shape a recipe's dataset entry names: its {@code type}, and the field names, role names and
 * flags it maps ({@code field_messages}, {@code message_property_mappings}, {@code roles}, {@code field_chosen}, ...),
 * so that a recipe written for someone's data can run on these.
 */
final class CorpusRows {
    private static final Gson GSON = new Gson();
    private static final String[] STORIES = {"Lily went to the park.", "Tom saw a big dog.", "The sun was warm.",
        "Sue had a red ball.", "A bird sang in the tree.", "Ben ate a green apple."};

    private CorpusRows() {}

    static List<String> rows(Map<String, Object> dataset, String rl, int count) {
        Object typeValue = dataset.get("type");
        String type = typeValue instanceof String s ? s : null;
        List<String> rows = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String a = STORIES[i % STORIES.length] + " (" + i + ")";
            String b = STORIES[(i + 1) % STORIES.length];
            rows.add(GSON.toJson(row(dataset, type, rl, a, b, i)));
        }
        return rows;
    }

    private static JsonObject row(Map<String, Object> dataset, String type, String rl, String a, String b, int i) {
        JsonObject row = new JsonObject();
        if (type == null) {
            JsonArray ids = new JsonArray();
            for (int t = 0; t < 12; t++) {
                ids.add(t == 0 ? 1 : 3 + (i * 7 + t * 13) % 500);
            }
            row.add("input_ids", ids);
            return row;
        }
        if (rl.equals("dpo") || rl.equals("ipo")) {
            return preference(dataset, type, a, b);
        }
        switch (type) {
            case "alpaca" -> {
                row.addProperty("instruction", "Tell a story.");
                row.addProperty("input", i % 2 == 0 ? "" : "about a dog");
                row.addProperty("output", a);
            }
            case "completion" -> row.addProperty(string(dataset, "field", "text"), a + " " + b);
            case "input_output" -> {
                JsonArray segments = new JsonArray();
                segments.add(segment("Question: why? ", false));
                segments.add(segment(a, true));
                row.add("segments", segments);
            }
            case "passthrough" -> row.addProperty("prompt", a);
            default -> conversation(dataset, row, a, b);
        }
        row.addProperty("answer", "yes");
        return row;
    }

    private static JsonObject segment(String text, boolean label) {
        JsonObject s = new JsonObject();
        s.addProperty("text", text);
        s.addProperty("label", label);
        return s;
    }

    /** A user turn and an assistant turn under the dataset's field and role names. */
    private static void conversation(Map<String, Object> dataset, JsonObject row, String a, String b) {
        JsonArray messages = new JsonArray();
        messages.add(message(dataset, "user", "Tell me a story."));
        JsonObject answer = message(dataset, "assistant", a + " " + b);
        String training = string(dataset, "message_field_training", null);
        if (training != null) {
            answer.addProperty(training, true);
        }
        messages.add(answer);
        row.add(string(dataset, "field_messages", "messages"), messages);
    }

    private static JsonObject message(Map<String, Object> dataset, String role, String content) {
        JsonObject m = new JsonObject();
        m.addProperty(field(dataset, "role"), written(dataset, role));
        m.addProperty(field(dataset, "content"), content);
        return m;
    }

    /** The dataset's name of a message property (message_property_mappings, or the older message_field_*). */
    @SuppressWarnings("unchecked")
    private static String field(Map<String, Object> dataset, String property) {
        if (dataset.get("message_property_mappings") instanceof Map<?, ?> m && m.get(property) instanceof String s) {
            return s;
        }
        return string(dataset, "message_field_" + property, property);
    }

    /** The dataset's own name for a template role: the first one {@code roles} lists for it. */
    private static String written(Map<String, Object> dataset, String role) {
        if (dataset.get("roles") instanceof Map<?, ?> roles && roles.get(role) instanceof List<?> names && !names.isEmpty()) {
            return String.valueOf(names.get(0));
        }
        return role;
    }

    private static JsonObject preference(Map<String, Object> dataset, String type, String a, String b) {
        JsonObject row = new JsonObject();
        String chosen = string(dataset, "field_chosen", "chosen");
        String rejected = string(dataset, "field_rejected", "rejected");
        if (type.startsWith("chat_template")) {
            JsonArray messages = new JsonArray();
            messages.add(message(dataset, "user", "Tell me a story."));
            row.add(string(dataset, "field_messages", "messages"), messages);
            row.add(chosen, message(dataset, "assistant", a));
            row.add(rejected, message(dataset, "assistant", b));
            return row;
        }
        String prompt = type.endsWith(".intel") ? "question" : "prompt";
        row.addProperty(prompt, "Tell me a story.");
        row.addProperty(chosen, a);
        row.addProperty(rejected, b);
        return row;
    }

    private static String string(Map<String, Object> dataset, String key, String fallback) {
        return dataset.get(key) instanceof String s && !s.isBlank() ? s : fallback;
    }
}
