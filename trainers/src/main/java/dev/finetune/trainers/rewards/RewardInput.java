package dev.finetune.trainers.rewards;

import com.google.gson.JsonObject;

/** What a reward function sees of one completion: the prompt text, the completion text, and the row's fields. */
public record RewardInput(String prompt, String completion, JsonObject fields) {}
