package dev.finetune.trainers.data;

import com.google.gson.JsonObject;

/**
 * One tokenized prompt and what the reward functions may read of its row.
 *
 * @param text the prompt as rendered (what reward functions receive as {@code prompt})
 * @param fields the dataset row's other fields (answers, keywords) for reward functions
 */
public record GrpoPrompt(long[] ids, String text, JsonObject fields) {
    public GrpoPrompt {
        if (ids.length == 0) {
            throw new IllegalArgumentException("a prompt needs at least one token (BOS)");
        }
    }
}
