package dev.finetune.trainers.text;

import java.util.Map;

/**
 * One chat turn as templates see it: {@code role} (system, user, assistant, tool), its text, and any other fields
 * the dataset gives the message ({@code reasoning_content}, {@code tool_calls}, {@code name}, …) as plain Java
 * values (String, Number, Boolean, List, Map), for templates that use them.
 */
public record Message(String role, String content, Map<String, Object> extra) {
    public Message {
        if (role == null || content == null) {
            throw new IllegalArgumentException("a message needs a role and a content");
        }
        extra = extra == null ? Map.of() : Map.copyOf(extra);
    }

    public Message(String role, String content) {
        this(role, content, Map.of());
    }

    Message withContent(String newContent) {
        return new Message(role, newContent, extra);
    }
}
