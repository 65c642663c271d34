package dev.finetune.recipes;

import dev.finetune.recipes.RecipeKeys.Key;
import dev.finetune.recipes.RecipeKeys.Status;
import dev.finetune.recipes.YamlNode.Entry;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Where;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * Reads the keys of one mapping, typed and checked against {@link RecipeKeys}; every supported key may be read
 * once. Problems are collected, never thrown, so a recipe's errors are all reported together; a value that fails
 * its check reads as absent so later rules don't pile up follow-on errors. This class keeps the mapping's
 * bookkeeping (old names, which keys were read, the table's defaults); {@link ValueReader} checks each value.
 */
final class KeyReader {

    private final Map<String, Entry> entries;
    private final String scope;
    private final Where where;
    private final Problems problems;
    private final Set<String> read = new HashSet<>();
    /** The keys this mapping may hold when the key table does not list them; {@code null}: the table decides. */
    private final List<String> keys;
    private final ValueReader values;

    /** @param scope the table prefix of this mapping's keys: {@code ""}, {@code "trl."}, {@code "datasets[]."} */
    KeyReader(Mapping map, String scope, Problems problems) {
        this.entries = new LinkedHashMap<>(map.entries());
        this.scope = scope;
        this.where = map.where();
        this.problems = problems;
        this.keys = null;
        this.values = new ValueReader(scope, true, problems);
        applyRenames();
    }

    /**
     * A mapping whose keys the key table does not list, such as a reward function's parameters: {@code keys} are
     * the ones it may hold, and the caller reports the {@link #unread} rest in its own words.
     *
     * @param scope what messages put before a key, e.g. {@code "contains."}
     */
    KeyReader(Mapping map, String scope, List<String> keys, Problems problems) {
        this.entries = new LinkedHashMap<>(map.entries());
        this.scope = scope;
        this.where = map.where();
        this.problems = problems;
        this.keys = List.copyOf(keys);
        this.values = new ValueReader(scope, false, problems);
    }

    Where where() {
        return where;
    }

    Problems problems() {
        return problems;
    }

    private void applyRenames() {
        for (Entry e : List.copyOf(entries.values())) {
            Key key = RecipeKeys.get(scope + e.key());
            if (key == null || key.status() != Status.RENAMED) {
                continue;
            }
            String target = key.target();
            if (entries.containsKey(target)) {
                problems.error(e.keyWhere(), "both '" + e.key() + "' and its new name '" + target + "' are set",
                        "keep only " + target);
            } else {
                problems.warn(e.keyWhere(), "'" + e.key() + "' is an old name", "rename it to " + target);
                entries.put(target, new Entry(target, e.keyWhere(), e.value()));
            }
            entries.remove(e.key());
        }
    }

    /** Renames a key before anything reads it (e.g. {@code fsdp_}-prefixed keys inside {@code fsdp_config}). */
    void rename(String from, String to, String why) {
        Where at = renamed(from, to);
        if (at != null) {
            problems.warn(at, why, "rename '" + from + "' to '" + to + "'");
        }
    }

    /**
     * Renames a key without a warning, for callers that say it once for several keys; returns where it was written,
     * or {@code null} when it was absent or clashes with the new name (an error).
     */
    Where renamed(String from, String to) {
        Entry e = entries.remove(from);
        if (e == null) {
            return null;
        }
        if (entries.containsKey(to)) {
            problems.error(e.keyWhere(), "both '" + from + "' and '" + to + "' are set", "keep only " + to);
            return null;
        }
        entries.put(to, new Entry(to, e.keyWhere(), e.value()));
        return e.keyWhere();
    }

    /** Written at all, even with an empty value. */
    boolean present(String key) {
        return entries.containsKey(key);
    }

    boolean has(String key) {
        Entry e = entries.get(key);
        return e != null && !(e.value() instanceof Scalar s && s.value() == null);
    }

    /** The read of {@code key} refused its written value (reported; it reads as absent, so don't ask for it). */
    boolean refused(String key) {
        return problems.invalid.contains(scope + key);
    }

    /** Where the key's value was written (the key itself when the value is empty), or this mapping when absent. */
    Where at(String key) {
        Entry e = entries.get(key);
        if (e == null) {
            return where;
        }
        return e.value() instanceof Scalar s && s.value() == null ? e.keyWhere() : e.value().where();
    }

    /** The raw value of a supported key, or {@code null} when absent or written empty. */
    YamlNode node(String key) {
        if (keys != null ? !keys.contains(key) : !supported(scope + key)) {
            throw new IllegalStateException("'" + scope + key + "' is not a supported key in "
                    + (keys != null ? keys : "recipe-keys.tsv"));
        }
        if (!read.add(key)) {
            throw new IllegalStateException("'" + scope + key + "' is read twice");
        }
        Entry e = entries.get(key);
        if (e != null) {
            problems.written(scope + key, at(key));
        }
        if (e == null || e.value() instanceof Scalar s && s.value() == null) {
            return null;
        }
        return e.value();
    }

    /**
     * The key table's default for {@code key}: a read without a fallback takes it, so a default is written once, in
     * {@code recipe-keys.tsv}.
     */
    private String tableDefault(String key) {
        Key spec = keys != null ? null : RecipeKeys.get(scope + key);
        if (spec == null || spec.defaultValue().isEmpty() || spec.scoped()) {
            throw new IllegalStateException("'" + scope + key + "' has no " + (spec != null && spec.scoped()
                    ? "single default in recipe-keys.tsv (it depends on the objective: numberFor)"
                    : "default in recipe-keys.tsv"));
        }
        return spec.defaultValue();
    }

    /**
     * The key table's default of a key whose default depends on the objective ({@code rl_beta}), for a recipe of
     * {@code objective} ({@link Recipe.Objective#key}).
     */
    double defaultNumber(String key, String objective) {
        Key spec = RecipeKeys.get(scope + key);
        String value = spec == null ? "" : spec.defaultFor(objective);
        if (value.isEmpty()) {
            throw new IllegalStateException("'" + scope + key + "' has no default for " + objective
                    + " in recipe-keys.tsv");
        }
        return Double.parseDouble(value);
    }

    /** The table's default as written, for a reader that parses the key's value itself. */
    String defaultText(String key) {
        return tableDefault(key);
    }

    /** The table's default of a list key ({@code [assistant]}), as a list. */
    List<String> defaultStrings(String key) {
        return parseList(key, tableDefault(key));
    }

    /** The table's default of a list key whose default belongs to one objective ({@code dpo=[sigmoid]}). */
    List<String> defaultStrings(String key, String objective) {
        Key spec = RecipeKeys.get(scope + key);
        String value = spec == null ? "" : spec.defaultFor(objective);
        if (value.isEmpty()) {
            throw new IllegalStateException("'" + scope + key + "' has no default for " + objective
                    + " in recipe-keys.tsv");
        }
        return parseList(key, value);
    }

    private List<String> parseList(String key, String value) {
        String text = value.strip();
        if (!text.startsWith("[") || !text.endsWith("]")) {
            throw new IllegalStateException("'" + scope + key + "' default is not a list: " + text);
        }
        return java.util.Arrays.stream(text.substring(1, text.length() - 1).split(",")).map(String::strip)
                .filter(s -> !s.isEmpty()).toList();
    }

    /** A text value, or the table's default. */
    String string(String key) {
        return string(key, tableDefault(key));
    }

    /** One of the enum's values (the one list of them; ChoiceDocsTest holds the key table to it), or the default. */
    <E extends Enum<E>> E choice(String key, Class<E> type) {
        return choice(key, Enum.valueOf(type, tableDefault(key).toUpperCase(Locale.ROOT)), type);
    }

    <E extends Enum<E>> E choice(String key, E fallback, Class<E> type) {
        String v = choice(key, null, spellings(type));
        return v == null ? fallback : Enum.valueOf(type, v.toUpperCase(Locale.ROOT));
    }

    /** How a recipe writes an enum's values: in lower case ({@code DROP} → {@code drop}). */
    static <E extends Enum<E>> List<String> spellings(Class<E> type) {
        return java.util.Arrays.stream(type.getEnumConstants()).map(e -> e.name().toLowerCase(Locale.ROOT)).toList();
    }

    boolean bool(String key) {
        return bool(key, Boolean.parseBoolean(tableDefault(key)));
    }

    Recipe.Flag flag(String key) {
        return flag(key, Recipe.Flag.valueOf(tableDefault(key).toUpperCase(java.util.Locale.ROOT)));
    }

    int integer(String key, long min) {
        return integer(key, Integer.valueOf(tableDefault(key)), min);
    }

    /** Named apart from {@code integer(key, fallback, min)}, which an int fallback would otherwise not reach. */
    int integerIn(String key, long min, long max) {
        return integer(key, Integer.valueOf(tableDefault(key)), min, max);
    }

    double number(String key, double min, double max) {
        return number(key, Double.valueOf(tableDefault(key)), min, max);
    }

    private static boolean supported(String fullKey) {
        Key spec = RecipeKeys.get(fullKey);
        return spec != null && spec.status() == Status.SUPPORTED;
    }

    String string(String key, String fallback) {
        return values.string(key, node(key), fallback);
    }

    /** A string that must be one of {@code choices}. */
    String choice(String key, String fallback, List<String> choices) {
        return values.choice(key, node(key), at(key), fallback, choices);
    }

    Boolean bool(String key, Boolean fallback) {
        return values.bool(key, node(key), fallback);
    }

    /** {@code true}, {@code false} or {@code auto}. */
    Recipe.Flag flag(String key, Recipe.Flag fallback) {
        return values.flag(key, node(key), fallback);
    }

    /** A whole number ≥ {@code min}; numeric text such as {@code "8"} is accepted, as Axolotl's schema does. */
    Integer integer(String key, Integer fallback, long min) {
        return integer(key, fallback, min, Integer.MAX_VALUE);
    }

    /** A whole number in [{@code min}, {@code max}]. */
    Integer integer(String key, Integer fallback, long min, long max) {
        return values.integer(key, node(key), fallback, min, max);
    }

    /** A finite number in [{@code min}, {@code max}]. */
    Double number(String key, Double fallback, double min, double max) {
        return values.number(key, node(key), fallback, min, max);
    }

    /** A list of text items; a single text value counts as a one-item list (as Axolotl allows for module names). */
    List<String> strings(String key, boolean singleAllowed) {
        return values.strings(key, node(key), singleAllowed);
    }

    Mapping mapping(String key) {
        return values.mapping(key, node(key));
    }

    /**
     * Where an unsupported key (the key table's status) is set to anything but off, or {@code null}: the caller
     * refuses it itself, because what to do instead depends on other keys, and {@link #finish} then leaves it alone.
     */
    Where unsupportedSet(String key) {
        Key spec = RecipeKeys.get(scope + key);
        if (spec == null || spec.status() != Status.UNSUPPORTED) {
            throw new IllegalStateException("'" + scope + key + "' is not an unsupported key in recipe-keys.tsv");
        }
        Entry e = entries.get(key);
        if (e == null || !LeftoverKeys.enabled(e.value()) || !read.add(key)) {
            return null;
        }
        return e.keyWhere();
    }

    /** The entries nobody read, in written order. */
    List<Entry> unread() {
        return entries.values().stream().filter(e -> !read.contains(e.key())).toList();
    }

    /** Reports every key nobody read, by its status in the key table ({@link LeftoverKeys}). */
    void finish() {
        LeftoverKeys.report(unread(), scope, problems);
    }
}
