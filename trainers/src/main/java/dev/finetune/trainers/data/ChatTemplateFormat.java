package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.TrainOnEos;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.text.ChatTemplate;
import dev.finetune.trainers.text.ChatTemplates;
import dev.finetune.trainers.text.TemplateException;
import dev.finetune.trainers.text.Tokenizer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * {@code type: chat_template}: a list of messages rendered with the chosen chat template, with Axolotl's label
 * rules: the content of each message whose role is in {@code roles_to_train} (or every message with
 * train_on_inputs; or as the message's own {@code message_field_training} flag says) is learned, template text
 * around it is not, and the tokens that close a turn are learned per {@code train_on_eos} (the EOS token) and
 * {@code train_on_eot} (the {@code eot_tokens}): {@code turn}: after trained turns, {@code all}, {@code last},
 * {@code none}. How rows become turns is {@link Conversations}'.
 */
final class ChatTemplateFormat implements RowFormat {
    /** Axolotl accepts an end token this many tokens after a turn's content (e.g. after a newline the template adds). */
    private static final int EOS_REACH = 3;

    private final Tokenizer tokenizer;
    private final ChatTemplate template;
    private final Conversations conversations;
    private final Set<String> rolesToTrain;
    private final TrainOnEos trainOnEos;
    private final TrainOnEos trainOnEot;
    /** The ids of the eot_tokens the template writes (the EOS token when the recipe names none). */
    private final Set<Integer> eotIds;
    private final boolean trainOnInputs;
    private final String note;

    ChatTemplateFormat(DatasetSpec spec, DataOptions options, Tokenizer tokenizer) {
        this.tokenizer = tokenizer;
        this.template = template(spec, options, tokenizer);
        this.conversations = new Conversations(spec, options.templates());
        // both as the recipe reader resolved them, the key table's defaults included
        this.rolesToTrain = spec.rolesToTrain().stream().map(conversations::role)
                .collect(Collectors.toUnmodifiableSet());
        this.trainOnEos = spec.trainOnEos();
        // Axolotl: train_on_eot follows train_on_eos unless written
        this.trainOnEot = spec.chat().trainOnEot() != null ? spec.chat().trainOnEot() : trainOnEos;
        this.trainOnInputs = options.trainOnInputs();
        List<String> notes = new ArrayList<>();
        this.eotIds = eotIds(options.templates().eotTokens(), spec, notes);
        String eos = tokenizer.special().eos();
        if (eos != null && trainOnEos != TrainOnEos.NONE && !template.source().contains(eos) && !template.source().contains("eos_token")) {
            notes.add("chat template '" + template.name() + "' never writes the EOS token " + eos
                    + ", so turn ends are not learned; a model trained this way may not stop");
        }
        this.note = notes.isEmpty() ? null : String.join("; ", notes);
    }

    /**
     * The dataset's own template ({@code chat_template}, or its {@code chat_template_jinja}, with the recipe's
     * jinja text when it names {@code jinja} without one), else the recipe's; with {@code chat_template_kwargs}.
     */
    static ChatTemplate template(DatasetSpec spec, DataOptions options, Tokenizer tokenizer) {
        boolean own = spec.chatTemplate() != null && !spec.chatTemplate().isBlank();
        ChatTemplate template = own
                ? ChatTemplates.resolve(spec.chatTemplate(), spec.chat().chatTemplateJinja() != null
                        ? spec.chat().chatTemplateJinja() : options.chatTemplateJinja(), tokenizer, spec.where() + " chat_template")
                : ChatTemplates.resolve(options.chatTemplate(), options.chatTemplateJinja(), tokenizer, "chat_template");
        return template.withVariables(options.templates().variables());
    }

    /**
     * Axolotl's rules for {@code eot_tokens}: each must be one token; one the template never writes is left out (with
     * a note); the EOS token among them must be trained as {@code train_on_eos} says.
     */
    private Set<Integer> eotIds(List<String> eotTokens, DatasetSpec spec, List<String> notes) {
        String eos = tokenizer.special().eos();
        if (eotTokens.isEmpty()) {
            return tokenizer.special().eosId() >= 0 ? Set.of(tokenizer.special().eosId()) : Set.of();
        }
        Set<Integer> ids = new java.util.LinkedHashSet<>();
        for (String token : eotTokens) {
            int id = tokenizer.singleTokenId(token);
            if (id < 0) {
                throw new UserError("eot_tokens", "eot token '" + token + "' is not one token of this tokenizer ("
                        + tokenizer.encode(token, false).length + " tokens)", "name tokens the tokenizer has as special "
                        + "tokens, e.g. the template's end-of-turn marker");
            }
            if (!template.source().contains(token)) {
                notes.add("eot token " + token + " never appears in chat template '" + template.name() + "', so it is not used");
                continue;
            }
            ids.add(id);
        }
        if (eos != null && eotTokens.contains(eos) && trainOnEos != trainOnEot) {
            throw new UserError(spec.where(), "the EOS token " + eos + " is in eot_tokens, but train_on_eos ("
                    + key(trainOnEos) + ") and train_on_eot (" + key(trainOnEot) + ") say different things about it",
                    "set train_on_eot equal to train_on_eos, or leave " + eos + " out of eot_tokens");
        }
        return Set.copyOf(ids);
    }

    private static String key(TrainOnEos value) {
        return value.name().toLowerCase(java.util.Locale.ROOT);
    }

    @Override
    public String note() {
        return note;
    }

    @Override
    public List<Example> examples(JsonObject row) {
        Conversations.Conversation conversation = conversations.read(row);
        List<Conversations.Turn> turns = conversation.turns();
        ChatTemplate.Rendered rendered;
        try {
            rendered = template.renderWithSpans(conversation.messages(), conversation.variables());
        } catch (TemplateException e) {
            throw new InvalidRow(e.getMessage(), "check the conversation's roles and order against the chat template");
        }
        Tokenizer.Encoded encoded = tokenizer.encodeWithSpans(rendered.text());
        int[] ids = encoded.ids();
        int[] labels = new int[ids.length];
        Arrays.fill(labels, Example.IGNORE);
        int lastEos = -1;
        int lastEot = -1;
        int eos = tokenizer.special().eosId();
        boolean everyEnd = trainOnEos == TrainOnEos.ALL || trainOnEot == TrainOnEos.ALL;
        for (int m = 0; m < turns.size(); m++) {
            Conversations.Turn turn = turns.get(m);
            boolean train = turn.train() != null ? turn.train()
                    : turn.trainedChars() != null ? true : trainOnInputs || rolesToTrain.contains(turn.message().role());
            ChatTemplate.Span span = rendered.contents().get(m);
            if ((!train && !everyEnd) || span == null || span.start() == span.end()) {
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
                    if (turn.trainedChars() == null || trainedInside(turn.trainedChars(), encoded, t, span)) {
                        labels[t] = ids[t];
                    }
                }
            }
            int eotAt = firstAtOrAfter(ids, eotIds, end);
            if (eotAt >= 0 && eotAt - end <= EOS_REACH) {
                lastEot = eotAt;
                if (trainOnEot == TrainOnEos.ALL || (trainOnEot == TrainOnEos.TURN && train)) {
                    labels[eotAt] = ids[eotAt];
                }
            }
            int eosAt = eos < 0 ? -1 : firstAtOrAfter(ids, Set.of(eos), end);
            if (eosAt >= 0 && eosAt - end <= EOS_REACH) {
                lastEos = eosAt;
                if (trainOnEos == TrainOnEos.ALL || (trainOnEos == TrainOnEos.TURN && train)) {
                    labels[eosAt] = ids[eosAt];
                }
            }
        }
        if (trainOnEot == TrainOnEos.LAST && lastEot >= 0) {
            labels[lastEot] = ids[lastEot];
        }
        if (trainOnEos == TrainOnEos.LAST && lastEos >= 0) {
            labels[lastEos] = ids[lastEos];
        }
        return List.of(new Example(ids, labels));
    }

    /**
     * Whether every character token {@code t} covers inside the content is a trained one: a token that straddles a
     * trained and an untrained stretch is left untrained, as Axolotl does.
     */
    private static boolean trainedInside(BitSet trained, Tokenizer.Encoded encoded, int t, ChatTemplate.Span content) {
        int from = Math.max(encoded.start()[t], content.start()) - content.start();
        int to = Math.min(encoded.end()[t], content.end()) - content.start();
        return to > from && trained.get(from, to).cardinality() == to - from;
    }

    private static int firstAtOrAfter(int[] ids, Set<Integer> tokens, int from) {
        if (tokens.isEmpty()) {
            return -1;
        }
        for (int t = from; t < ids.length; t++) {
            if (tokens.contains(ids[t])) {
                return t;
            }
        }
        return -1;
    }
}
