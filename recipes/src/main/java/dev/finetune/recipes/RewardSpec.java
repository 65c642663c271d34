package dev.finetune.recipes;

import java.nio.file.Path;
import java.util.List;

/**
 * One GRPO reward function from {@code trl.reward_funcs}: a built-in chosen by name with its parameters, or an
 * external command. Every built-in scores one completion at a time from its text and the dataset row's fields.
 * Read only by {@link RewardSpecs}; run by the trainer.
 */
public sealed interface RewardSpec {

    /** The name its mean is logged under: {@code rewards/<label>}. */
    String label();

    /** 1 when the completion, trimmed, equals the row's {@code field} (trimmed). */
    record ExactMatch(String label, String field, boolean ignoreCase) implements RewardSpec {}

    /** 1 when {@code pattern} (Java regex) is found anywhere in the completion. */
    record RegexMatch(String label, String pattern, boolean ignoreCase) implements RewardSpec {}

    /** 1 when the last number in the completion equals the number in the row's {@code field}, within tolerance. */
    record NumericAnswer(String label, String field, double tolerance) implements RewardSpec {}

    /** 1 when the completion's length, in {@code unit}s ({@code words} or {@code chars}), lies in [min, max]. */
    record Length(String label, int min, int max, String unit) implements RewardSpec {}

    /**
     * The share of {@code words} (or of the words in the row's {@code field}) that occur in the completion, so a
     * completion earns partial credit.
     */
    record Contains(String label, List<String> words, String field, boolean ignoreCase) implements RewardSpec {}

    /** 1 when the whole completion matches {@code pattern} (Java regex, dot matches newlines). */
    record Format(String label, String pattern) implements RewardSpec {}

    /**
     * A program that reads JSON lines {@code {prompt, completion, fields}} on stdin and writes one number per line;
     * run through {@code sh -c} in {@code workingDir} (the recipe's folder), once per run. Refused unless the user
     * passes {@code --allow-commands}.
     *
     * @param timeoutSeconds how long a batch's answers may take before the program is stopped with its children
     */
    record Command(String label, String command, Path workingDir, int timeoutSeconds) implements RewardSpec {
        public static final int DEFAULT_TIMEOUT_SECONDS = 120;
        public static final int MAX_TIMEOUT_SECONDS = 3600;

        public Command(String label, String command, Path workingDir) {
            this(label, command, workingDir, DEFAULT_TIMEOUT_SECONDS);
        }
    }
}
