package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.TrainOnEos;
import dev.finetune.trainers.text.ChatTemplate;
import dev.finetune.trainers.text.ChatTemplates;
import dev.finetune.trainers.text.Message;
import dev.finetune.trainers.text.TemplateException;
import dev.finetune.trainers.text.Tokenizer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * {@code type: chat_template}: a list of messages rendered with the chosen chat template, with Axolotl's label
 * rules: the content of each message whose role is in {@code roles_to_train} (or every message with
 * train_on_inputs) is learned, template text around it is not, and the EOS token that closes a turn is learned
 * per {@code train_on_eos} ({@code turn}: after trained turns, {@code all}, {@code last}, {@code none}).
 */
final class ChatTemplateFormat implements RowFormat {
    /** Axolotl's default role names for ShareGPT-style data. */
    private static final Map<String, String> ROLE_ALIASES = Map.of("human", "user", "gpt", "assistant");
    /** Axolotl accepts an EOS this many tokens after a turn's content (e.g. after a newline the template adds). */
    private static final int EOS_REACH = 3;

    private final Tokenizer tokenizer;
    private final ChatTemplate template;
    private final String messagesField;
    private final String roleField;
    private final String contentField;
    /** Further message properties the dataset renames: template name → dataset field. */
    private final Map<String, String> otherFields;
    private final Set<String> rolesToTrain;
    private final TrainOnEos trainOnEos;
    private final boolean trainOnInputs;
    private final String note;

    ChatTemplateFormat(DatasetSpec spec, DataOptions options, Tokenizer tokenizer) {
        this.tokenizer = tokenizer;
        boolean ownTemplate = spec.chatTemplate() != null && !spec.chatTemplate().isBlank();
        this.template = ownTemplate
                ? ChatTemplates.resolve(spec.chatTemplate(), options.chatTemplateJinja(), tokenizer, spec.where() + " chat_template")
                : ChatTemplates.resolve(options.chatTemplate(), options.chatTemplateJinja(), tokenizer, "chat_template");
        this.messagesField = blankTo(spec.fieldMessages(), "messages");
        Map<String, String> mappings = spec.messagePropertyMappings() == null ? Map.of() : spec.messagePropertyMappings();
        this.roleField = blankTo(mappings.get("role"), "role");
        this.contentField = blankTo(mappings.get("content"), "content");
        Map<String, String> others = new LinkedHashMap<>(mappings);
        others.remove("role");
        others.remove("content");
        this.otherFields = Map.copyOf(others);
        List<String> roles = spec.rolesToTrain() == null ? List.of("assistant") : spec.rolesToTrain();
        this.rolesToTrain = roles.stream().map(r -> ROLE_ALIASES.getOrDefault(r, r)).collect(Collectors.toUnmodifiableSet());
        this.trainOnEos = spec.trainOnEos() != null ? spec.trainOnEos() : TrainOnEos.TURN;
        this.trainOnInputs = options.trainOnInputs();
        String eos = tokenizer.special().eos();
        this.note = eos != null && trainOnEos != TrainOnEos.NONE && !template.source().contains(eos) && !template.source().contains("eos_token")
                ? "chat template '" + template.name() + "' never writes the EOS token " + eos
                        + ", so turn ends are not learned; a model trained this way may not stop"
                : null;
    }

    @Override
    public String note() {
        return note;
    }

    @Override
    public List<Example> examples(JsonObject row) {
        List<Message> messages = messages(row);
        ChatTemplate.Rendered rendered;
        try {
            rendered = template.renderWithSpans(messages);
        } catch (TemplateException e) {
            throw new InvalidRow(e.getMessage(), "check the conversation's roles and order against the chat template");
        }
        Tokenizer.Encoded encoded = tokenizer.encodeWithSpans(rendered.text());
        int[] ids = encoded.ids();
        int[] labels = new int[ids.length];
        Arrays.fill(labels, Example.IGNORE);
        int lastEos = -1;
        int eos = tokenizer.special().eosId();
        for (int m = 0; m < messages.size(); m++) {
            boolean train = trainOnInputs || rolesToTrain.contains(messages.get(m).role());
            ChatTemplate.Span span = rendered.contents().get(m);
            if ((!train && trainOnEos != TrainOnEos.ALL) || span == null || span.start() == span.end()) {
                continue;
            }
            int first = -1;
            int end = -1;
            for (int t = 0; t < ids.length; t++) {
                if (encoded.start()[t] >= 0 && encoded.start()[t] < span.end() && encoded.end()[t] > span.start()) {
                    if (first < 0) {
                        first = t;
                    }
                    end = t + 1;
                }
            }
            if (first < 0) {
                continue;
            }
            if (train) {
                for (int t = first; t < end; t++) {
                    labels[t] = ids[t];
                }
            }
            int eosAt = firstAtOrAfter(ids, eos, end);
            if (eosAt >= 0 && eosAt - end <= EOS_REACH) {
                lastEos = eosAt;
                if (trainOnEos == TrainOnEos.ALL || (trainOnEos == TrainOnEos.TURN && train)) {
                    labels[eosAt] = ids[eosAt];
                }
            }
        }
        if (trainOnEos == TrainOnEos.LAST && lastEos >= 0) {
            labels[lastEos] = ids[lastEos];
        }
        return List.of(new Example(ids, labels));
    }

    private List<Message> messages(JsonObject row) {
        JsonElement list = row.get(messagesField);
        String hint = "write \"" + messagesField + "\": [{\"" + roleField + "\": \"user\", \"" + contentField + "\": \"...\"}, ...]";
        if (list == null || list.isJsonNull()) {
            throw new InvalidRow("missing field '" + messagesField + "' (type chat_template)",
                    hint + ", or name the field with field_messages:");
        }
        if (!list.isJsonArray() || list.getAsJsonArray().isEmpty()) {
            throw new InvalidRow("field '" + messagesField + "' must be a non-empty array of messages, found " + Fields.describe(list), hint);
        }
        List<Message> messages = new ArrayList<>();
        JsonElement system = row.get("system");
        int index = 0;
        for (JsonElement element : (JsonArray) list) {
            String where = messagesField + "[" + index + "]";
            if (!element.isJsonObject()) {
                throw new InvalidRow(where + " must be an object, found " + Fields.describe(element), hint);
            }
            JsonObject message = element.getAsJsonObject();
            String role = text(message, roleField, where, hint);
            role = ROLE_ALIASES.getOrDefault(role, role);
            // Axolotl adds the row's "system" field as a first turn when the conversation has no system message.
            if (index == 0 && !"system".equals(role) && system != null && !system.isJsonNull()) {
                messages.add(new Message("system", Fields.asString(system, "system")));
            }
            messages.add(new Message(role, content(message.get(contentField), where, hint), extra(message)));
            index++;
        }
        return messages;
    }

    /**
     * Properties beyond role and content, under the names the template expects: renamed ones through
     * message_property_mappings, the rest as the dataset spells them.
     */
    private Map<String, Object> extra(JsonObject message) {
        Map<String, Object> extra = new LinkedHashMap<>();
        for (Map.Entry<String, String> renamed : otherFields.entrySet()) {
            Object value = Fields.toJava(message.get(renamed.getValue()));
            if (value != null) {
                extra.put(renamed.getKey(), value);
            }
        }
        for (Map.Entry<String, JsonElement> field : message.entrySet()) {
            String name = field.getKey();
            if (name.equals(roleField) || name.equals(contentField) || otherFields.containsValue(name) || extra.containsKey(name)) {
                continue;
            }
            Object value = Fields.toJava(field.getValue());
            if (value != null) {
                extra.put(name, value);
            }
        }
        return extra;
    }

    private String text(JsonObject message, String field, String where, String hint) {
        JsonElement value = message.get(field);
        if (value == null || value.isJsonNull()) {
            throw new InvalidRow(where + " has no '" + field + "'", hint + "; other field names are mapped with message_property_mappings:");
        }
        return Fields.asString(value, where + "." + field);
    }

    /** Content is a string, or (OpenAI style) a list of parts whose {@code text} fields are joined. */
    private String content(JsonElement value, String where, String hint) {
        String field = where + "." + contentField;
        if (value == null || value.isJsonNull()) {
            throw new InvalidRow(where + " has no '" + contentField + "'", hint + "; other field names are mapped with message_property_mappings:");
        }
        if (!value.isJsonArray()) {
            return Fields.asString(value, field);
        }
        StringBuilder joined = new StringBuilder();
        for (JsonElement part : value.getAsJsonArray()) {
            if (!part.isJsonObject() || !part.getAsJsonObject().has("text")) {
                throw new InvalidRow(field + " parts must be objects with a 'text' field, found " + Fields.describe(part),
                        "write \"content\": \"...\" or [{\"type\": \"text\", \"text\": \"...\"}]");
            }
            joined.append(Fields.asString(part.getAsJsonObject().get("text"), field + "[].text"));
        }
        return joined.toString();
    }

    private static int firstAtOrAfter(int[] ids, int token, int from) {
        if (token < 0) {
            return -1;
        }
        for (int t = from; t < ids.length; t++) {
            if (ids[t] == token) {
                return t;
            }
        }
        return -1;
    }

    private static String blankTo(String value, String fallback) {
        return value == null || value.isBlank() ? fallback : value;
    }
}
