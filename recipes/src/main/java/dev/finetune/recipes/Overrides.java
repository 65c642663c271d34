package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Entry;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Sequence;
import dev.finetune.recipes.YamlNode.Where;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code key=value} overrides from the command line, applied to the merged tree and validated exactly like file keys.
 */
final class Overrides {
    private Overrides() {}

    /** {@code key=value} or {@code a.b=value}; the value is read as YAML, exactly as if it were in the file. */
    static Mapping applyOverride(Mapping tree, String override) {
        Where where = new Where("override '" + override + "'", Path.of("").toAbsolutePath());
        int eq = override.indexOf('=');
        if (eq <= 0) {
            throw new UserError(where.label(), "an override must look like key=value",
                    "e.g. learning_rate=1e-4 or trl.beta=0.1");
        }
        String[] path = override.substring(0, eq).trim().split("\\.", -1);
        for (String part : path) {
            if (part.isBlank()) {
                throw new UserError(where.label(), "the key '" + override.substring(0, eq) + "' has an empty part",
                        "nested keys are written a.b=value");
            }
        }
        String text = override.substring(eq + 1);
        YamlNode value = YamlTrees.parse(text, where.label(), where.dir(), where);
        value = value == null ? new Scalar(null, "", where) : relabel(value, where);
        return setPath(tree, path, 0, value, where);
    }

    /** Override values are located by the override itself, not by a line inside its one-line text. */
    private static YamlNode relabel(YamlNode node, Where where) {
        if (node instanceof Mapping m) {
            Map<String, Entry> entries = new LinkedHashMap<>();
            for (Entry e : m.entries().values()) {
                entries.put(e.key(), new Entry(e.key(), where, relabel(e.value(), where)));
            }
            return new Mapping(entries, where);
        }
        if (node instanceof Sequence s) {
            List<YamlNode> items = new ArrayList<>();
            for (YamlNode item : s.items()) {
                items.add(relabel(item, where));
            }
            return new Sequence(items, where);
        }
        Scalar s = (Scalar) node;
        return new Scalar(s.value(), s.text(), where);
    }

    private static Mapping setPath(Mapping map, String[] path, int i, YamlNode value, Where where) {
        Map<String, Entry> entries = new LinkedHashMap<>(map.entries());
        String key = path[i];
        if (i == path.length - 1) {
            entries.put(key, new Entry(key, where, value));
        } else {
            Entry old = entries.get(key);
            Mapping child;
            if (old == null) {
                child = new Mapping(Map.of(), where);
            } else if (old.value() instanceof Mapping m) {
                child = m;
            } else {
                throw new UserError(where.label(), "'" + key + "' is " + YamlNode.describe(old.value())
                        + " (set at " + old.value().where() + "), so it has no sub-key '" + path[i + 1] + "'",
                        "override '" + key + "' itself instead");
            }
            entries.put(key, new Entry(key, old == null ? where : old.keyWhere(), setPath(child, path, i + 1, value, where)));
        }
        return new Mapping(entries, map.where());
    }
}
