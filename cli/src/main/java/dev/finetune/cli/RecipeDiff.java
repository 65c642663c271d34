package dev.finetune.cli;

import dev.finetune.recipes.RecipeKeys;
import dev.finetune.recipes.ValidatedRecipe;
import java.math.BigDecimal;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.TreeSet;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * The meaning of a recipe as a flat, sorted table of keys, and the difference of two such tables: what
 * {@code finetune diff} shows where {@code git diff} shows text.
 *
 * <p>A recipe's table is its flattened form (the one {@code validate --flatten} prints: {@code base:} merged,
 * overrides applied, local paths relative to one folder so that the same file compares equal from two places),
 * with every key the recipe leaves out filled in from the key table's default, marked as such. Nested keys are
 * dotted ({@code trl.beta}), list items indexed ({@code datasets[0].type}); a list of plain values is one value.
 * Defaults of list items and of sections the recipe does not have are left out: they would only add noise.
 */
final class RecipeDiff {

    /** One key's value; {@code fromDefault} when the recipe does not set it. */
    record Value(Object value, boolean fromDefault) {
        String show() {
            return render(value) + (fromDefault ? " (default)" : "");
        }
    }

    /** One differing key; {@code null} on the side that lacks it. */
    record Change(String key, Value a, Value b) {
        String describe() {
            return key + ": " + (a == null ? "(not set)" : a.show()) + " -> " + (b == null ? "(not set)" : b.show());
        }
    }

    private RecipeDiff() {}

    /** The resolved table of a recipe, local paths written relative to {@code relativeTo}. */
    static Map<String, Value> resolved(ValidatedRecipe recipe, Path relativeTo) {
        Object tree = new Yaml(new SafeConstructor(new LoaderOptions())).load(recipe.flatten(relativeTo));
        Map<String, Value> flat = new TreeMap<>();
        flatten(tree, "", flat);
        String objective = recipe.recipe().objective().key();
        for (RecipeKeys.Key key : RecipeKeys.all()) {
            String name = key.name();
            // the default of this recipe's objective (rl_beta: 0.1 for DPO, 0.0 for GRPO)
            String defaultValue = key.defaultFor(objective);
            if (key.status() != RecipeKeys.Status.SUPPORTED || defaultValue.isEmpty() || name.contains("[]")
                    || flat.containsKey(name) || flat.keySet().stream().anyMatch(k -> k.startsWith(name + ".") || k.startsWith(name + "["))) {
                continue;
            }
            int dot = name.lastIndexOf('.');
            if (dot > 0 && flat.keySet().stream().noneMatch(k -> k.startsWith(name.substring(0, dot + 1)))) {
                continue;
            }
            Object value = new Yaml(new SafeConstructor(new LoaderOptions())).load(defaultValue);
            flat.put(name, new Value(value, true));
        }
        return flat;
    }

    private static void flatten(Object node, String path, Map<String, Value> flat) {
        if (node instanceof Map<?, ?> map) {
            if (map.isEmpty() && !path.isEmpty()) {
                flat.put(path, new Value(map, false));
            }
            for (Map.Entry<?, ?> e : map.entrySet()) {
                flatten(e.getValue(), path.isEmpty() ? String.valueOf(e.getKey()) : path + "." + e.getKey(), flat);
            }
        } else if (node instanceof List<?> list && list.stream().anyMatch(i -> i instanceof Map || i instanceof List)) {
            for (int i = 0; i < list.size(); i++) {
                flatten(list.get(i), path + "[" + i + "]", flat);
            }
        } else {
            flat.put(path, new Value(node, false));
        }
    }

    /** Keys whose values differ, in key order; a default equal to a written value is no difference. */
    static List<Change> changes(Map<String, Value> a, Map<String, Value> b) {
        List<Change> changes = new ArrayList<>();
        TreeSet<String> keys = new TreeSet<>(a.keySet());
        keys.addAll(b.keySet());
        for (String key : keys) {
            Value x = a.get(key);
            Value y = b.get(key);
            if (x == null || y == null || !same(x.value(), y.value())) {
                changes.add(new Change(key, x, y));
            }
        }
        return changes;
    }

    /** Equal in meaning: numbers by value ({@code 2e-4} is {@code 0.0002}, {@code 1} is {@code 1.0}). */
    private static boolean same(Object x, Object y) {
        if (x instanceof Number n && y instanceof Number m) {
            try {
                return new BigDecimal(n.toString()).compareTo(new BigDecimal(m.toString())) == 0;
            } catch (NumberFormatException e) {
                return n.toString().equals(m.toString()); // .inf, .nan
            }
        }
        return Objects.equals(x, y);
    }

    private static String render(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof String s) {
            return s.isEmpty() || !s.strip().equals(s) ? "'" + s + "'" : s;
        }
        if (value instanceof List<?> list) {
            return list.stream().map(RecipeDiff::render).toList().toString();
        }
        return value.toString();
    }
}
