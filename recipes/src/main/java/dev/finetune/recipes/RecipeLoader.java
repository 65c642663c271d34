package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Mapping;
import java.nio.file.Path;
import java.util.List;

/**
 * Reads recipe files into {@link YamlNode} trees: {@link YamlTrees} parses one file, {@link BaseInheritance} merges
 * {@code base:} files, {@link Overrides} applies {@code key=value}. Interpreting keys is {@link RecipeReader}'s job.
 */
public final class RecipeLoader {

    /** Our own addition to Axolotl's format: inherit another recipe file. */
    public static final String BASE_KEY = BaseInheritance.BASE_KEY;

    private RecipeLoader() {}

    /** The recipe at {@code file} with every {@code base:} merged in, {@code base} removed, then the overrides. */
    public static Mapping load(Path file, List<String> overrides) {
        Mapping tree = BaseInheritance.load(file, file.toString());
        for (String override : overrides) {
            tree = Overrides.applyOverride(tree, override);
        }
        return tree;
    }

    /** Parses one file on its own (no {@code base:} processing). */
    public static Mapping parseFile(Path file, String label) {
        return YamlTrees.parseFile(file, label);
    }

    /** {@code key=value} or {@code a.b=value}; the value is read as YAML, exactly as if it were in the file. */
    public static Mapping applyOverride(Mapping tree, String override) {
        return Overrides.applyOverride(tree, override);
    }
}
