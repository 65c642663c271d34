package dev.finetune.recipes;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * {@code trl.scale_rewards}: what GRPO divides the centred rewards by, as TRL 1.13 names it ({@code true} is read
 * as {@code group}, {@code false} as {@code none}, as TRL does).
 */
public enum ScaleRewards {
    /** The standard deviation of the prompt's group (TRL's default). */
    GROUP,
    /** The standard deviation over the whole batch. */
    BATCH,
    /** Nothing: advantages are the centred rewards. */
    NONE;

    public String key() {
        return name().toLowerCase(Locale.ROOT);
    }

    public static ScaleRewards of(String key) {
        return Arrays.stream(values()).filter(t -> t.key().equals(key)).findFirst().orElse(null);
    }

    public static List<String> keys() {
        return Arrays.stream(values()).map(ScaleRewards::key).toList();
    }
}
