package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.JsonSyntaxException;
import dev.finetune.recipes.ChatOptions;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.trainers.text.Message;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A conversation row as Axolotl's {@code chat_template} strategy reads it: the message list under
 * {@code field_messages}, fields renamed by {@code message_property_mappings}, roles mapped by {@code roles}, the
 * row's {@code field_system} text (or {@code default_system_message}) as the system turn when the messages bring
 * none, a leading system turn dropped with {@code drop_system_message}, reasoning read from {@code field_thinking}
 * (or split out of {@code <think>} with {@code split_thinking}) and handed to the template as
 * {@code template_thinking_key}, per-turn training flags, and the row's tool definitions.
 */
final class Conversations {
    private final String messagesField;
    private final String roleField;
    private final String contentField;
    /** Further message properties the dataset renames: template name → dataset field. */
    private final Map<String, String> otherFields;
    private final ChatOptions chat;
    private final String defaultSystemMessage;

    /**
     * One turn: the message the template renders, whether it is trained ({@code null}: by its role), and which
     * characters of its content are trained ({@code null}: all of them, when the turn is).
     */
    record Turn(Message message, Boolean train, BitSet trainedChars) {}

    /** The turns, and what the template sees besides them ({@code tools}). */
    record Conversation(List<Turn> turns, Map<String, Object> variables) {
        List<Message> messages() {
            return turns.stream().map(Turn::message).toList();
        }
    }

    Conversations(DatasetSpec spec, DataOptions.Templates templates) {
        this.messagesField = blankTo(spec.fieldMessages(), "messages");
        Map<String, String> mappings = spec.messagePropertyMappings() == null ? Map.of() : spec.messagePropertyMappings();
        this.roleField = blankTo(mappings.get("role"), "role");
        this.contentField = blankTo(mappings.get("content"), "content");
        Map<String, String> others = new LinkedHashMap<>(mappings);
        others.remove("role");
        others.remove("content");
        this.otherFields = Map.copyOf(others);
        this.chat = spec.chat();
        this.defaultSystemMessage = templates.defaultSystemMessage();
    }

    /** The field holding the message list, for messages about rows. */
    String messagesField() {
        return messagesField;
    }

    /** The role the template sees for a role name the recipe or the dataset writes. */
    String role(String written) {
        return chat.role(written);
    }

    Conversation read(JsonObject row) {
        return new Conversation(turns(row, messagesField), variables(row));
    }

    /** The messages in {@code field} of the row, as turns (for preference rows, whose prompt may sit elsewhere). */
    List<Turn> turns(JsonObject row, String field) {
        JsonElement list = row.get(field);
        String hint = "write \"" + field + "\": [{\"" + roleField + "\": \"user\", \"" + contentField + "\": \"...\"}, ...]";
        if (list == null || list.isJsonNull()) {
            throw new InvalidRow("missing field '" + field + "' (type chat_template)",
                    hint + ", or name the field with field_messages:");
        }
        if (!list.isJsonArray() || list.getAsJsonArray().isEmpty()) {
            throw new InvalidRow("field '" + field + "' must be a non-empty array of messages, found " + Fields.describe(list), hint);
        }
        List<Turn> turns = new ArrayList<>();
        int index = 0;
        for (JsonElement element : (JsonArray) list) {
            String where = field + "[" + index + "]";
            if (!element.isJsonObject()) {
                throw new InvalidRow(where + " must be an object, found " + Fields.describe(element), hint);
            }
            turns.add(turn(element.getAsJsonObject(), where, hint));
            index++;
        }
        boolean hasSystem = "system".equals(turns.get(0).message().role());
        JsonElement system = row.get(chat.fieldSystem());
        // Axolotl adds the row's system field as a first turn when the conversation has no system message.
        if (!hasSystem && system != null && !system.isJsonNull()) {
            turns.add(0, new Turn(new Message("system", Fields.asString(system, chat.fieldSystem())), null, null));
        } else if (!hasSystem && defaultSystemMessage != null) {
            turns.add(0, new Turn(new Message("system", defaultSystemMessage), null, null));
        }
        if (chat.dropSystemMessage() && "system".equals(turns.get(0).message().role())) {
            turns.remove(0);
            if (turns.isEmpty()) {
                throw new InvalidRow("the conversation holds only a system message, which drop_system_message removes",
                        "drop such rows from the data, or set drop_system_message: false");
            }
        }
        return turns;
    }

    private Turn turn(JsonObject message, String where, String hint) {
        String role = role(text(message, roleField, where, hint));
        Content content = content(message.get(contentField), where, hint);
        Map<String, Object> extra = extra(message);
        Boolean train = null;
        if (chat.messageFieldTraining() != null && message.has(chat.messageFieldTraining())
                && !message.get(chat.messageFieldTraining()).isJsonNull()) {
            JsonElement flag = message.get(chat.messageFieldTraining());
            if (!flag.isJsonPrimitive() || !flag.getAsJsonPrimitive().isBoolean()) {
                throw new InvalidRow(where + "." + chat.messageFieldTraining() + " must be true or false, found "
                        + Fields.describe(flag), "message_field_training names a true/false field of each message");
            }
            train = flag.getAsBoolean();
        }
        BitSet trained = content.trained();
        if (trained == null && chat.messageFieldTrainingDetail() != null && message.has(chat.messageFieldTrainingDetail())
                && !message.get(chat.messageFieldTrainingDetail()).isJsonNull()) {
            trained = detail(message.get(chat.messageFieldTrainingDetail()), content.text().length(),
                    where + "." + chat.messageFieldTrainingDetail());
        }
        String text = content.text();
        if (chat.splitThinking() && "assistant".equals(role)) {
            String[] split = splitThinking(text);
            if (split != null) {
                if (trained != null) {
                    throw new InvalidRow(where + " has per-span training flags and reasoning inside its content, and "
                            + "split_thinking would move the spans' characters", "give the reasoning in field_thinking, "
                            + "or drop split_thinking");
                }
                extra.put(chat.templateThinkingKey(), split[0]);
                text = split[1];
            }
        }
        return new Turn(new Message(role, text, extra), train, trained);
    }

    /**
     * Properties beyond role and content, under the names the template expects: renamed ones through
     * message_property_mappings, the reasoning under template_thinking_key, the rest as the dataset spells them
     * (the training flags excepted: they are for us, not the template).
     */
    private Map<String, Object> extra(JsonObject message) {
        Map<String, Object> extra = new LinkedHashMap<>();
        for (Map.Entry<String, String> renamed : otherFields.entrySet()) {
            Object value = Fields.toJava(message.get(renamed.getValue()));
            if (value != null) {
                extra.put(renamed.getKey(), value);
            }
        }
        boolean thinkingRenamed = !chat.fieldThinking().equals(chat.templateThinkingKey());
        if (thinkingRenamed && !extra.containsKey(chat.templateThinkingKey())) {
            Object reasoning = Fields.toJava(message.get(chat.fieldThinking()));
            if (reasoning != null) {
                extra.put(chat.templateThinkingKey(), reasoning);
            }
        }
        for (Map.Entry<String, JsonElement> field : message.entrySet()) {
            String name = field.getKey();
            if (name.equals(roleField) || name.equals(contentField) || otherFields.containsValue(name)
                    || extra.containsKey(name) || name.equals(chat.messageFieldTraining())
                    || name.equals(chat.messageFieldTrainingDetail()) || thinkingRenamed && name.equals(chat.fieldThinking())) {
                continue;
            }
            Object value = Fields.toJava(field.getValue());
            if (value != null) {
                extra.put(name, value);
            }
        }
        return extra;
    }

    /** The row's tool definitions ({@code field_tools}; a JSON string is parsed, as Axolotl does) as {@code tools}. */
    private Map<String, Object> variables(JsonObject row) {
        JsonElement tools = row.get(chat.fieldTools());
        if (tools == null || tools.isJsonNull()) {
            return Map.of();
        }
        if (tools.isJsonPrimitive() && tools.getAsJsonPrimitive().isString()) {
            try {
                tools = JsonParser.parseString(tools.getAsString());
            } catch (JsonSyntaxException e) {
                throw new InvalidRow("field '" + chat.fieldTools() + "' is text that is not JSON: " + e.getMessage(),
                        "write the tool definitions as a JSON list");
            }
        }
        if (!tools.isJsonArray()) {
            throw new InvalidRow("field '" + chat.fieldTools() + "' must be a list of tool definitions, found "
                    + Fields.describe(tools), "write e.g. [{\"type\": \"function\", \"function\": {\"name\": ...}}]");
        }
        return Map.of("tools", Fields.toJava(tools));
    }

    private String text(JsonObject message, String field, String where, String hint) {
        JsonElement value = message.get(field);
        if (value == null || value.isJsonNull()) {
            throw new InvalidRow(where + " has no '" + field + "'", hint + "; other field names are mapped with message_property_mappings:");
        }
        return Fields.asString(value, where + "." + field);
    }

    /** A message's text, and which of its characters are trained when its parts say so. */
    private record Content(String text, BitSet trained) {}

    /**
     * Content is a string, or (OpenAI style) a list of parts whose {@code text} fields are joined; a part may carry
     * {@code train} (or {@code weight} 0/1), which makes per-character training flags as Axolotl's parts do.
     */
    private Content content(JsonElement value, String where, String hint) {
        String field = where + "." + contentField;
        if (value == null || value.isJsonNull()) {
            throw new InvalidRow(where + " has no '" + contentField + "'", hint + "; other field names are mapped with message_property_mappings:");
        }
        if (!value.isJsonArray()) {
            return new Content(Fields.asString(value, field), null);
        }
        StringBuilder joined = new StringBuilder();
        BitSet trained = new BitSet();
        boolean flagged = false;
        for (JsonElement part : value.getAsJsonArray()) {
            if (!part.isJsonObject() || !part.getAsJsonObject().has("text")) {
                throw new InvalidRow(field + " parts must be objects with a 'text' field, found " + Fields.describe(part),
                        "write \"content\": \"...\" or [{\"type\": \"text\", \"text\": \"...\"}]");
            }
            JsonObject object = part.getAsJsonObject();
            String text = Fields.asString(object.get("text"), field + "[].text");
            boolean train = true;
            if (object.has("train") && !object.get("train").isJsonNull()) {
                flagged = true;
                train = object.get("train").getAsBoolean();
            } else if (object.has("weight") && !object.get("weight").isJsonNull()) {
                flagged = true;
                train = object.get("weight").getAsDouble() != 0;
            }
            if (train) {
                trained.set(joined.length(), joined.length() + text.length());
            }
            joined.append(text);
        }
        return new Content(joined.toString(), flagged ? trained : null);
    }

    /** Axolotl's training detail: spans {@code {begin_offset, end_offset (inclusive), train}} of the content. */
    private static BitSet detail(JsonElement value, int length, String where) {
        String hint = "write e.g. [{\"begin_offset\": 0, \"end_offset\": 9, \"train\": true}]";
        if (!value.isJsonArray()) {
            throw new InvalidRow(where + " must be a list of spans, found " + Fields.describe(value), hint);
        }
        BitSet trained = new BitSet();
        for (JsonElement item : value.getAsJsonArray()) {
            if (!item.isJsonObject()) {
                throw new InvalidRow(where + " must hold objects, found " + Fields.describe(item), hint);
            }
            JsonObject span = item.getAsJsonObject();
            int begin = offset(span, "begin_offset", where, hint);
            int end = offset(span, "end_offset", where, hint);
            if (end < begin || end >= length) {
                throw new InvalidRow(where + " has the span " + begin + ".." + end + ", outside the content's "
                        + length + " characters", "offsets count characters of the content, the end included");
            }
            JsonElement train = span.get("train");
            if (train == null || !train.isJsonPrimitive() || !train.getAsJsonPrimitive().isBoolean()) {
                throw new InvalidRow(where + " span " + begin + ".." + end + " needs \"train\": true or false", hint);
            }
            if (train.getAsBoolean()) {
                trained.set(begin, end + 1);
            }
        }
        return trained;
    }

    private static int offset(JsonObject span, String name, String where, String hint) {
        JsonElement v = span.get(name);
        if (v == null || !v.isJsonPrimitive() || !v.getAsJsonPrimitive().isNumber() || v.getAsDouble() < 0
                || v.getAsDouble() != Math.rint(v.getAsDouble())) {
            throw new InvalidRow(where + " needs a whole number " + name + " in every span", hint);
        }
        return v.getAsInt();
    }

    /**
     * {@code [reasoning, answer]} when the content holds one of Axolotl's reasoning pairs, else null: the text between
     * the first pair, and what follows it (inside {@code <|begin_of_solution|>…} when that is there).
     */
    static String[] splitThinking(String content) {
        for (List<String> pair : ChatOptions.THINKING_PAIRS) {
            int start = content.indexOf(pair.get(0));
            int end = content.indexOf(pair.get(1));
            if (start < 0 || end < 0 || end < start) {
                continue;
            }
            String reasoning = content.substring(start + pair.get(0).length(), end).strip();
            String rest = content.substring(end + pair.get(1).length()).stripLeading();
            int solution = rest.indexOf("<|begin_of_solution|>");
            int solutionEnd = rest.indexOf("<|end_of_solution|>");
            if (solution >= 0 && solutionEnd > solution) {
                rest = rest.substring(solution + "<|begin_of_solution|>".length(), solutionEnd).strip();
            }
            return new String[] {reasoning, rest};
        }
        return null;
    }

    private static String blankTo(String value, String fallback) {
        return value == null || value.isBlank() ? fallback : value;
    }
}
