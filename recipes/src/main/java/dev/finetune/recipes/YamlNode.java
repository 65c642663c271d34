package dev.finetune.recipes;

import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A recipe as written, before any key is interpreted: mappings, sequences and scalars, each with the place it
 * came from. Merging {@code base:} files and applying overrides work on this tree so that every later message can
 * still point at the exact line that set a value.
 */
public sealed interface YamlNode {

    Where where();

    /** {@code file:line:col} (1-based), or the override that set the value; {@code dir} resolves relative paths. */
    record Where(String label, Path dir) {
        @Override
        public String toString() {
            return label;
        }
    }

    /** Keys keep their written order; {@code keyWhere} points at the key itself, for unknown-key messages. */
    record Mapping(Map<String, Entry> entries, Where where) implements YamlNode {
        public Mapping {
            entries = new LinkedHashMap<>(entries);
        }

        public Entry entry(String key) {
            return entries.get(key);
        }

        public YamlNode get(String key) {
            Entry e = entries.get(key);
            return e == null ? null : e.value();
        }
    }

    record Entry(String key, Where keyWhere, YamlNode value) {}

    record Sequence(List<YamlNode> items, Where where) implements YamlNode {
        public Sequence {
            items = List.copyOf(items);
        }
    }

    /**
     * A scalar with YAML's own reading of it (YAML 1.1 core types, the way Axolotl's {@code safe_load} sees
     * most values) and the text as written, so a quoted {@code "2e-4"} can still be read as a number.
     *
     * @param value {@code null}, {@link Boolean}, {@link Long}, {@link java.math.BigInteger}, {@link Double} or {@link String}
     */
    record Scalar(Object value, String text, Where where) implements YamlNode {}

    /**
     * The value as plain Java data, for settings handed on as they are (template variables, model config overrides):
     * mappings as ordered maps, lists, and the scalars' own values. The order is the recipe's, so the text of a
     * record holding it is the same from one run to the next.
     */
    static Object plain(YamlNode node) {
        if (node instanceof Mapping m) {
            Map<String, Object> out = new LinkedHashMap<>();
            m.entries().forEach((k, e) -> out.put(k, plain(e.value())));
            return java.util.Collections.unmodifiableMap(out);
        }
        if (node instanceof Sequence s) {
            return java.util.Collections.unmodifiableList(new java.util.ArrayList<>(s.items().stream().map(YamlNode::plain).toList()));
        }
        return ((Scalar) node).value();
    }

    /** What a user would call the node's type in a message. */
    static String describe(YamlNode node) {
        if (node instanceof Mapping) {
            return "a mapping";
        }
        if (node instanceof Sequence) {
            return "a list";
        }
        Object v = ((Scalar) node).value();
        if (v == null) {
            return "empty (null)";
        }
        if (v instanceof Boolean) {
            return "a boolean '" + v + "'";
        }
        if (v instanceof Number) {
            return "the number " + ((Scalar) node).text();
        }
        return "the text '" + v + "'";
    }
}
