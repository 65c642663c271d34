package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.recipes.PreferenceChecks;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.text.ChatTemplate;
import dev.finetune.trainers.text.ChatTemplates;
import dev.finetune.trainers.text.Message;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.data.PreferencePair;
import dev.finetune.trainers.data.GrpoPrompt;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Preference pairs (DPO) and prompts (GRPO) from the recipe's datasets, with Axolotl's DPO types and TRL's plain
 * and conversational rows ({@code passthrough}).
 *
 * <p>Every type comes down to a conversation, the chosen and rejected answers, and a way to render them: a chat
 * template (the format's built-in one for {@code chatml.*}/{@code llama3.*}, the recipe's for
 * {@code chat_template.default} and for conversational rows), or plain concatenation for plain-text rows as TRL
 * does. Tokenized as TRL's {@code DPOTrainer} does: the prompt alone and the prompt followed by each answer, the
 * answer being the tokens after the prompt's (so a word that continues the prompt is tokenized as it is read, not
 * with the extra word-start marker a separately tokenized answer gets). Text rows (Axolotl's types render to text
 * before TRL sees them) get BOS as the tokenizer adds it and EOS after each answer; TRL's conversational rows get
 * neither, the chat template marks the turns.
 */
public final class RlRows {
    private static final Logger LOG = LogManager.getLogger(RlRows.class);

    private static final List<String> PROMPT_FIELDS = List.of("prompt", "input", "question", "instruction");

    private RlRows() {}

    /**
     * Held-out split as {@code val_set_size} draws it, and what was left out.
     *
     * @param tooLong rows longer than {@code sequence_len}: dropped or truncated per {@code excess_length_strategy}
     * @param skipped invalid rows skipped under {@code dataset_skip_invalid_rows}
     */
    public record Split<T>(List<T> train, List<T> eval, int rows, int tooLong, int skipped) {}

    /** What one row says before rendering: a prompt as text (plain) or as messages, and optional answers. */
    private record Parsed(String plainPrompt, List<Message> messages, ChatTemplate template, Message chosen,
            Message rejected, String plainChosen, String plainRejected, boolean conversational) {}

    public static Split<PreferencePair> preferences(List<DatasetSpec> specs, DataOptions options, Tokenizer tokenizer) {
        List<List<PreferencePair>> perDataset = new ArrayList<>();
        Counts counts = new Counts();
        PreferenceChecks checks = new PreferenceChecks();
        for (DatasetSpec spec : specs) {
            List<PreferencePair> pairs = new ArrayList<>();
            perDataset.add(pairs);
            forEachRow(spec, options, counts, (row, location) -> {
                Parsed parsed = parse(spec, row, options, tokenizer, true);
                checks.add(row.get(spec.fieldChosen() != null ? spec.fieldChosen() : "chosen"),
                        row.get(spec.fieldRejected() != null ? spec.fieldRejected() : "rejected"));
                String prompt = promptText(parsed);
                long[] promptIds = ids(prompt, tokenizer, !parsed.conversational());
                PreferencePair pair = new PreferencePair(promptIds,
                        answer(parsed, prompt, promptIds, parsed.chosen(), parsed.plainChosen(), tokenizer),
                        answer(parsed, prompt, promptIds, parsed.rejected(), parsed.plainRejected(), tokenizer));
                if (pair.length() <= options.sequenceLen()) {
                    pairs.add(pair);
                    return;
                }
                counts.tooLong++;
                int room = options.sequenceLen() - pair.prompt().length;
                switch (options.excessLength()) {
                    case RAISE -> throw tooLong(location, pair.length(), options);
                    // as TRL truncates: the answers are cut, the prompt kept whole (if it fits at all)
                    case TRUNCATE -> {
                        if (room > 0) {
                            pairs.add(new PreferencePair(pair.prompt(), Arrays.copyOf(pair.chosen(),
                                    Math.min(room, pair.chosen().length)), Arrays.copyOf(pair.rejected(),
                                    Math.min(room, pair.rejected().length))));
                        }
                    }
                    case DROP -> { }
                }
            });
        }
        String warning = checks.warning();
        if (warning != null) {
            LOG.warn("warning: {}: {} (hint: {})", specs.get(0).where(), warning, PreferenceChecks.HINT);
        }
        return split(perDataset, counts, options, specs,
                pair -> List.of(pair.prompt(), pair.chosen(), pair.rejected()));
    }

    /** GRPO prompts; the row's other fields go to the reward functions. */
    public static Split<GrpoPrompt> prompts(List<DatasetSpec> specs, DataOptions options, Tokenizer tokenizer) {
        List<List<GrpoPrompt>> perDataset = new ArrayList<>();
        Counts counts = new Counts();
        for (DatasetSpec spec : specs) {
            List<GrpoPrompt> prompts = new ArrayList<>();
            perDataset.add(prompts);
            forEachRow(spec, options, counts, (row, location) -> {
                Parsed parsed = parse(spec, row, options, tokenizer, false);
                String prompt = promptText(parsed);
                long[] ids = ids(prompt, tokenizer, !parsed.conversational());
                if (ids.length < options.sequenceLen()) {
                    prompts.add(new GrpoPrompt(ids, prompt, row));
                    return;
                }
                counts.tooLong++;
                // a cut prompt would ask a different question, so truncate drops it too
                if (options.excessLength() == Recipe.ExcessLength.RAISE) {
                    throw tooLong(location, ids.length, options);
                }
            });
        }
        // a prompt's identity is its tokens and the fields its rewards read
        return split(perDataset, counts, options, specs, prompt -> List.of(prompt.ids(),
                prompt.fields().toString().chars().asLongStream().toArray()));
    }

    private interface RowSink {
        void accept(JsonObject row, String location);
    }

    private static final class Counts {
        int rows;
        int tooLong;
        int skipped;
    }

    private static UserError tooLong(String location, int length, DataOptions options) {
        return new UserError(location, "the row has " + length + " tokens, more than sequence_len "
                + options.sequenceLen(), "raise sequence_len, or set excess_length_strategy: truncate or drop");
    }

    /** Every row to {@code sink}; a broken one stops the run, or is counted and skipped when the recipe says so. */
    private static void forEachRow(DatasetSpec spec, DataOptions options, Counts counts, RowSink sink) {
        Rows.read(spec, row -> {
            counts.rows++;
            try {
                if (row.problem() != null) {
                    throw row.problem();
                }
                sink.accept(row.value(), row.location());
            } catch (dev.finetune.trainers.text.Tokenizer.Untokenizable untokenizable) {
                // the text's own file and line, never just "text" (no skipping: a wrong tokenizer fails every row)
                throw new UserError(row.location() + (untokenizable.where().equals("text") ? ""
                        : " (" + untokenizable.where() + ")"), untokenizable.getMessage(), untokenizable.hint());
            } catch (InvalidRow invalid) {
                if (options.skipInvalidRows()) {
                    counts.skipped++;
                    return;
                }
                throw new UserError(row.location(), invalid.getMessage(),
                        invalid.hint() + " (or set dataset_skip_invalid_rows: true to skip such rows)");
            }
        });
    }

    private static <T> Split<T> split(List<List<T>> perDataset, Counts counts, DataOptions options,
            List<DatasetSpec> specs, java.util.function.Function<T, List<long[]>> identity) {
        if (perDataset.stream().allMatch(List::isEmpty)) {
            throw new UserError(specs.get(0).where(), "the datasets hold no usable row (" + counts.rows + " read, "
                    + counts.tooLong + " longer than sequence_len, " + counts.skipped + " invalid)",
                    "check the rows' fields, and that sequence_len leaves room for them");
        }
        RowSelection.Result<T> selected = RowSelection.apply(perDataset, options.selection(), options.valSetSize(),
                options.seed(), identity);
        if (selected.train().isEmpty()) {
            throw new UserError("dataset_shard_idx", "shard " + options.selection().shardIndex() + " of "
                    + options.selection().shardCount() + " holds no row", "use fewer shards (dataset_shard_num)");
        }
        return new Split<>(selected.train(), selected.eval(), counts.rows, counts.tooLong, counts.skipped);
    }

    /** Axolotl's DPO types that render with a built-in template named by the type's prefix, read by its suffix. */
    private static final java.util.Set<DatasetType> AXOLOTL_TEMPLATED = java.util.EnumSet.of(DatasetType.CHATML,
            DatasetType.CHATML_DEFAULT, DatasetType.CHATML_INTEL, DatasetType.CHATML_PROMPT_PAIRS, DatasetType.LLAMA3,
            DatasetType.LLAMA3_DEFAULT, DatasetType.LLAMA3_INTEL, DatasetType.LLAMA3_PROMPT_PAIRS);

    private static Parsed parse(DatasetSpec spec, JsonObject row, DataOptions options, Tokenizer tokenizer,
            boolean answers) {
        DatasetType kind = spec.type() == null ? DatasetType.PASSTHROUGH : spec.type();
        String type = kind.key();
        String chosenField = spec.fieldChosen() != null ? spec.fieldChosen() : "chosen";
        String rejectedField = spec.fieldRejected() != null ? spec.fieldRejected() : "rejected";
        if (AXOLOTL_TEMPLATED.contains(kind)) {
            String format = type.startsWith("chatml") ? "chatml" : "llama3";
            String variant = type.contains(".") ? type.substring(type.indexOf('.') + 1) : "default";
            String promptField = switch (variant) {
                case "intel" -> "question";
                case "prompt_pairs" -> "prompt";
                default -> firstPresent(row, PROMPT_FIELDS, type);
            };
            List<Message> messages = new ArrayList<>();
            String system = Fields.optionalString(row, "system");
            if (!system.isEmpty()) {
                messages.add(new Message("system", system));
            }
            messages.add(new Message("user", Fields.requiredString(row, promptField, type)));
            ChatTemplate template = ChatTemplates.builtIn(format, tokenizer.special(), spec.where());
            return new Parsed(null, messages, template,
                    answers ? assistant(row, variant.equals("default") ? or(row, chosenField, "chosen_response") : chosenField, type) : null,
                    answers ? assistant(row, variant.equals("default") ? or(row, rejectedField, "rejected_response") : rejectedField, type) : null,
                    null, null, false);
        }
        if (kind == DatasetType.CHAT_TEMPLATE_DEFAULT || kind == DatasetType.CHAT_TEMPLATE) {
            String field = spec.fieldMessages() != null ? spec.fieldMessages() : row.has("prompt") && !row.has("messages")
                    ? "prompt" : "messages";
            // the roles map, renamed fields and system turn rules of the dataset, as for supervised conversations
            Conversations conversations = new Conversations(spec, options.templates());
            List<Message> prompt = conversations.turns(row, field).stream().map(Conversations.Turn::message).toList();
            return new Parsed(null, prompt, ChatTemplateFormat.template(spec, options, tokenizer),
                    answers ? message(row, chosenField, type, spec, conversations) : null,
                    answers ? message(row, rejectedField, type, spec, conversations) : null, null, null, false);
        }
        // passthrough: TRL's rows as they are; a list prompt is a conversation, a string is plain text
        JsonElement prompt = row.get("prompt");
        if (prompt != null && prompt.isJsonArray()) {
            return new Parsed(null, messages(row, "prompt", type), template(spec, options, tokenizer),
                    answers ? message(row, chosenField, type, null, null) : null,
                    answers ? message(row, rejectedField, type, null, null) : null, null, null, true);
        }
        return new Parsed(Fields.requiredString(row, "prompt", type), null, null, null, null,
                answers ? Fields.requiredString(row, chosenField, type) : null,
                answers ? Fields.requiredString(row, rejectedField, type) : null, false);
    }

    private static ChatTemplate template(DatasetSpec spec, DataOptions options, Tokenizer tokenizer) {
        String choice = spec.chatTemplate() != null ? spec.chatTemplate() : options.chatTemplate();
        return ChatTemplates.resolve(choice, options.chatTemplateJinja(), tokenizer, spec.where() + ": chat_template")
                .withVariables(options.templates().variables());
    }

    private static String promptText(Parsed parsed) {
        return parsed.template() == null ? parsed.plainPrompt() : parsed.template().render(parsed.messages(), true);
    }

    /**
     * The answer's tokens: the prompt and answer tokenized together, less the prompt's tokens (TRL slices the same
     * way, and like TRL we keep the slice when a merge across the boundary makes the prompt's tokens differ).
     */
    private static long[] answer(Parsed parsed, String prompt, long[] promptIds, Message message, String plain,
            Tokenizer tokenizer) {
        String full;
        if (parsed.template() == null) {
            full = prompt + plain;
        } else {
            List<Message> all = new ArrayList<>(parsed.messages());
            all.add(message);
            full = parsed.template().render(all, false);
            if (!full.startsWith(prompt)) {
                throw new InvalidRow("the chat template renders the conversation with an answer differently from the "
                        + "prompt alone, so the answer cannot be separated", "use a template whose generation prompt "
                        + "is a prefix of the answered conversation (chatml, llama3, qwen_25)");
            }
        }
        long[] ids = ids(full, tokenizer, !parsed.conversational());
        ids = Arrays.copyOfRange(ids, Math.min(promptIds.length, ids.length), ids.length);
        int eos = tokenizer.special().eosId();
        if (!parsed.conversational() && eos >= 0 && (ids.length == 0 || ids[ids.length - 1] != eos)) {
            ids = Arrays.copyOf(ids, ids.length + 1);
            ids[ids.length - 1] = eos;
        }
        return ids;
    }

    private static long[] ids(String text, Tokenizer tokenizer, boolean bos) {
        String bosText = tokenizer.special().bos();
        boolean addBos = bos && (bosText == null || !text.startsWith(bosText));
        return Arrays.stream(tokenizer.encode(text, addBos)).asLongStream().toArray();
    }

    private static String firstPresent(JsonObject row, List<String> fields, String type) {
        for (String field : fields) {
            if (row.has(field) && !row.get(field).isJsonNull()) {
                return field;
            }
        }
        throw new InvalidRow("the row has none of " + String.join(", ", fields) + " (type " + type + ")",
                "name the prompt field prompt");
    }

    private static String or(JsonObject row, String field, String alternative) {
        return row.has(field) || !row.has(alternative) ? field : alternative;
    }

    private static Message assistant(JsonObject row, String field, String type) {
        return new Message("assistant", Fields.requiredString(row, field, type));
    }

    /**
     * An answer as a message object, a one-message list (TRL conversational), or plain text; a chat_template dataset's
     * field names and roles map applies to it as to the prompt ({@code spec} null: TRL's own names).
     */
    private static Message message(JsonObject row, String field, String type, DatasetSpec spec,
            Conversations conversations) {
        JsonElement value = row.get(field);
        if (value != null && value.isJsonArray()) {
            JsonArray list = value.getAsJsonArray();
            if (list.size() != 1 || !list.get(0).isJsonObject()) {
                throw new InvalidRow("field '" + field + "' must hold one assistant message", "write e.g. "
                        + "\"" + field + "\": [{\"role\": \"assistant\", \"content\": \"...\"}]");
            }
            value = list.get(0);
        }
        if (value != null && value.isJsonObject()) {
            JsonObject m = value.getAsJsonObject();
            Map<String, String> names = spec == null || spec.messagePropertyMappings() == null ? Map.of()
                    : spec.messagePropertyMappings();
            String roleField = names.getOrDefault("role", "role");
            String contentField = names.getOrDefault("content", "content");
            String role = m.has(roleField) ? Fields.asString(m.get(roleField), roleField) : "assistant";
            return new Message(conversations == null ? role : conversations.role(role),
                    Fields.requiredString(m, contentField, type));
        }
        return assistant(row, field, type);
    }

    private static List<Message> messages(JsonObject row, String field, String type) {
        JsonElement value = row.get(field);
        if (value == null || !value.isJsonArray()) {
            throw new InvalidRow("field '" + field + "' must be a list of messages (type " + type + ")",
                    "write e.g. \"" + field + "\": [{\"role\": \"user\", \"content\": \"...\"}]");
        }
        List<Message> messages = new ArrayList<>();
        for (JsonElement item : value.getAsJsonArray()) {
            if (!item.isJsonObject()) {
                throw new InvalidRow("every message in '" + field + "' must be an object", "use {role, content}");
            }
            JsonObject m = item.getAsJsonObject();
            messages.add(new Message(Fields.requiredString(m, "role", type), Fields.requiredString(m, "content", type)));
        }
        return messages;
    }
}
