package dev.finetune.recipes;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * {@code trl.loss_type}: how GRPO's per-token losses are averaged, as TRL 1.13 names the choices.
 */
public enum GrpoLossType {
    /** Mean over each completion's tokens, then over completions (the original GRPO; favours short answers). */
    GRPO,
    /** Mean over the tokens of the micro batch. */
    BNPO,
    /** Sum over tokens divided by completions × {@code max_completion_length} (Dr. GRPO: no length bias). */
    DR_GRPO,
    /** Sum over tokens divided by the tokens of the whole accumulation window (TRL's default). */
    DAPO;

    public String key() {
        return name().toLowerCase(Locale.ROOT);
    }

    public static GrpoLossType of(String key) {
        return Arrays.stream(values()).filter(t -> t.key().equals(key)).findFirst().orElse(null);
    }

    public static List<String> keys() {
        return Arrays.stream(values()).map(GrpoLossType::key).toList();
    }
}
