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
    private final String adapted;
    private final Map<String, Object> tokens;

    ChatTemplate(String name, String source, Tokenizer.SpecialTokens special) {
        this.name = name;
        this.source = source;
        this.adapted = JinjaSource.adapt(source);
        Map<String, Object> tokens = new HashMap<>(Jinja.GLOBALS);
        putIfSet(tokens, "bos_token", special.bos());
        putIfSet(tokens, "eos_token", special.eos());
        putIfSet(tokens, "pad_token", special.pad());
        putIfSet(tokens, "unk_token", special.unk());
        this.tokens = Map.copyOf(tokens);
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
        Map<String, Object> context = new HashMap<>(tokens);
        List<Map<String, Object>> asMaps = new ArrayList<>(messages.size());
        for (Message message : messages) {
            Map<String, Object> map = new LinkedHashMap<>();
            map.put("role", message.role());
            map.put("content", message.content());
            asMaps.add(map);
        }
        context.put("messages", asMaps);
        context.put("add_generation_prompt", addGenerationPrompt);
        return Jinja.render(adapted, context);
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
        String text = render(messages, false);
        List<Span> spans = new ArrayList<>(messages.size());
        for (int i = 0; i < messages.size(); i++) {
            List<Message> probe = new ArrayList<>(messages);
            probe.set(i, new Message(messages.get(i).role(), PLACEHOLDER));
            String framed = render(probe, false);
            int at = framed.indexOf(PLACEHOLDER);
            if (at < 0) {
                spans.add(null);
                continue;
            }
            if (framed.indexOf(PLACEHOLDER, at + 1) >= 0) {
                throw new Jinja.TemplateException("chat template '" + name + "' writes message " + i
                        + "'s content more than once, so its tokens cannot be told apart for label masking");
            }
            String before = framed.substring(0, at);
            String after = framed.substring(at + PLACEHOLDER.length());
            if (!text.startsWith(before) || !text.endsWith(after) || before.length() + after.length() > text.length()) {
                throw new Jinja.TemplateException("chat template '" + name + "' renders message " + i + " ("
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
