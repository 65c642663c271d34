package dev.finetune.recipes;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The errors and warnings of one recipe, in the order found: collected rather than thrown, so that {@code validate}
 * reports them all at once.
 */
final class Problems {
    final List<Finding> errors = new ArrayList<>();
    final List<Finding> warnings = new ArrayList<>();
    /** Keys whose written value failed its check: rules built on them stay quiet instead of piling up. */
    final Set<String> invalid = new HashSet<>();
    /**
     * A plugin was refused: what it would have brought (datasets, reward functions) is not asked for again, since
     * the fix is to remove the plugin and its keys, not to add more.
     */
    boolean pluginRefused;
    /** Where each key a section reader took was written, by its table name: rules checked later point there. */
    private final Map<String, Object> written = new HashMap<>();

    void error(Object where, String message, String hint) {
        errors.add(new Finding(String.valueOf(where), message, hint));
    }

    void warn(Object where, String message, String hint) {
        warnings.add(new Finding(String.valueOf(where), message, hint));
    }

    void written(String key, Object where) {
        this.written.put(key, where);
    }

    /** Where {@code key} (its table name) was written, or {@code fallback} when the recipe does not write it. */
    Object at(String key, Object fallback) {
        return written.getOrDefault(key, fallback);
    }
}
