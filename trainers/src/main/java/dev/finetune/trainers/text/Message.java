package dev.finetune.trainers.text;

/** One chat turn as templates see it: {@code role} (system, user, assistant, tool) and its text. */
public record Message(String role, String content) {
    public Message {
        if (role == null || content == null) {
            throw new IllegalArgumentException("a message needs a role and a content");
        }
    }
}
