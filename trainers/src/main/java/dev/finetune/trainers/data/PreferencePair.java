package dev.finetune.trainers.data;

/** One tokenized preference: the same prompt continued two ways, the first preferred. Completions may be empty. */
public record PreferencePair(long[] prompt, long[] chosen, long[] rejected) {
    public PreferencePair {
        if (prompt.length == 0) {
            throw new IllegalArgumentException("a preference pair needs a prompt of at least one token (BOS)");
        }
    }

    public int length() {
        return prompt.length + Math.max(chosen.length, rejected.length);
    }
}
