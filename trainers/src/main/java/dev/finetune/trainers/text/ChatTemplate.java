package dev.finetune.trainers.text;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A chat template ready to render: its name (a built-in's name, {@code tokenizer_default} or {@code jinja}), the
 * Jinja source as the user or model wrote it, and the special tokens it may refer to.
 */
public final class ChatTemplate {
    /** Stands in for one message's content; private-use code points, so no real text or template contains it. */
    private static final String PLACEHOLDER = "\uE000finetune-content\uE001";

    private final String name;
    private final String source;
    private final Jinja.Compiled compiled;
    private final Map<String, Object> globals;

    ChatTemplate(String name, String source, Tokenizer.SpecialTokens special) {
        this.name = name;
        this.source = source;
        String adapted = JinjaSource.adapt(source);
        Jinja.requireKnownFiltersAndTests(adapted);
        this.compiled = Jinja.compile(adapted);
        Map<String, Object> globals = new HashMap<>(Jinja.GLOBALS);
        putIfSet(globals, "bos_token", special.bos());
        putIfSet(globals, "eos_token", special.eos());
        putIfSet(globals, "pad_token", special.pad());
        putIfSet(globals, "unk_token", special.unk());
        this.globals = Map.copyOf(globals);
    }

    private ChatTemplate(ChatTemplate template, Map<String, Object> globals) {
        this.name = template.name;
        this.source = template.source;
        this.compiled = template.compiled;
        this.globals = Map.copyOf(globals);
    }

    /**
     * The same template with {@code variables} set for every rendering ({@code chat_template_kwargs}, such as
     * {@code enable_thinking: false}), as transformers' {@code apply_chat_template(**kwargs)} passes them.
     */
    public ChatTemplate withVariables(Map<String, Object> variables) {
        if (variables.isEmpty()) {
            return this;
        }
        Map<String, Object> globals = new HashMap<>(this.globals);
        globals.putAll(variables);
        return new ChatTemplate(this, globals);
    }

    public String name() {
        return name;
    }

    /** The Jinja source, as it should be saved into an output tokenizer_config.json. */
    public String source() {
        return source;
    }

    /** The conversation as the model sees it; {@code addGenerationPrompt} appends the assistant's header. */
    public String render(List<Message> messages, boolean addGenerationPrompt) {
        return render(messages, addGenerationPrompt, Map.of());
    }

    /** As {@link #render(List, boolean)}, with variables of this conversation alone (its {@code tools}). */
    public String render(List<Message> messages, boolean addGenerationPrompt, Map<String, Object> rowVariables) {
        Map<String, Object> context = new HashMap<>(globals);
        context.putAll(rowVariables);
        List<Map<String, Object>> asMaps = new ArrayList<>(messages.size());
        for (Message message : messages) {
            Map<String, Object> map = new LinkedHashMap<>(message.extra());
            map.put("role", message.role());
            map.put("content", message.content());
            asMaps.add(map);
        }
        context.put("messages", asMaps);
        context.put("add_generation_prompt", addGenerationPrompt);
        return Jinja.render(compiled, context);
    }

    /**
     * The rendered conversation and, per message, where its content sits in the text.
     *
     * <p>Each message's content is found the way Axolotl finds a turn: render once more with that content replaced
     * by a placeholder, and what precedes and follows the placeholder must frame the real rendering. Comparing
     * whole conversations (not prefixes) also covers templates that fold one message into another, such as a
     * system prompt inside the first user turn. A template that rewrites content in a way this cannot locate is
     * refused rather than masked wrongly.
     */
    public Rendered renderWithSpans(List<Message> messages) {
        return renderWithSpans(messages, Map.of());
    }

    /** As {@link #renderWithSpans(List)}, with variables of this conversation alone (its {@code tools}). */
    public Rendered renderWithSpans(List<Message> messages, Map<String, Object> rowVariables) {
        String text = render(messages, false, rowVariables);
        List<Span> spans = new ArrayList<>(messages.size());
        for (int i = 0; i < messages.size(); i++) {
            List<Message> probe = new ArrayList<>(messages);
            probe.set(i, messages.get(i).withContent(PLACEHOLDER));
            String framed = render(probe, false, rowVariables);
            int at = framed.indexOf(PLACEHOLDER);
            if (at < 0) {
                spans.add(null);
                continue;
            }
            if (framed.indexOf(PLACEHOLDER, at + 1) >= 0) {
                throw new TemplateException("chat template '" + name + "' writes message " + i
                        + "'s content more than once, so its tokens cannot be told apart for label masking");
            }
            String before = framed.substring(0, at);
            String after = framed.substring(at + PLACEHOLDER.length());
            if (!text.startsWith(before) || !text.endsWith(after) || before.length() + after.length() > text.length()) {
                throw new TemplateException("chat template '" + name + "' renders message " + i + " ("
                        + messages.get(i).role() + ") differently depending on its content, so its tokens cannot be"
                        + " located for label masking");
            }
            spans.add(new Span(before.length(), text.length() - after.length()));
        }
        return new Rendered(text, spans);
    }

    /** A rendered conversation; {@code contents.get(i)} is message i's content range, or null if not rendered. */
    public record Rendered(String text, List<Span> contents) {}

    /** A range of characters, end exclusive. */
    public record Span(int start, int end) {}

    private static void putIfSet(Map<String, Object> map, String key, String value) {
        if (value != null) {
            map.put(key, value);
        }
    }
}
