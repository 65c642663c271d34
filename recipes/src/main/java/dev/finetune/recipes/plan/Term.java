package dev.finetune.recipes.plan;

import java.util.Collections;
import java.util.EnumMap;
import java.util.Map;

/**
 * One line of the memory table: bytes per device in each phase, and how the number was made.
 *
 * @param name stable key, used in JSON ({@code weights}, {@code activations}, ...)
 * @param how the formula with its numbers, for the reader who wants to check it
 */
public record Term(String name, String how, Map<Phase, Long> bytes) {

    public Term {
        bytes = Collections.unmodifiableMap(new EnumMap<>(bytes));
    }

    public long in(Phase phase) {
        return bytes.getOrDefault(phase, 0L);
    }

    public long max() {
        return bytes.values().stream().mapToLong(Long::longValue).max().orElse(0);
    }
}
