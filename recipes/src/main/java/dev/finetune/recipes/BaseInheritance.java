package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Entry;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Where;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * {@code base:} (our addition to Axolotl's format): a recipe inherits another file, deep-merged, with cycles and
 * missing files reported where the {@code base:} line is.
 */
final class BaseInheritance {
    /** Our own addition to Axolotl's format: inherit another recipe file. */
    static final String BASE_KEY = "base";
    /** How many files a chain of {@code base:} may hold: far more than any real recipe library nests. */
    static final int MAX_DEPTH = 32;

    private BaseInheritance() {}

    /** The recipe at {@code file} with every {@code base:} merged in and {@code base} removed. */
    static Mapping load(Path file, String label) {
        return loadWithBases(file, label, new ArrayList<>(), new ArrayList<>());
    }

    /** @param baseLines where each file of {@code chain} wrote its {@code base:}, for the cycle message */
    private static Mapping loadWithBases(Path file, String label, List<String> chain, List<Where> baseLines) {
        Path normalized = file.toAbsolutePath().normalize();
        if (chain.contains(normalized.toString())) {
            int start = chain.indexOf(normalized.toString());
            List<String> cycle = new ArrayList<>(chain.subList(start, chain.size()));
            cycle.add(normalized.toString());
            throw new UserError(baseLines.get(start).label(), "base: files include each other in a cycle: "
                    + cycle.stream().map(p -> Path.of(p).getFileName().toString()).collect(Collectors.joining(" -> ")),
                    "remove the 'base:' line from one of these files");
        }
        chain.add(normalized.toString());
        Mapping own = YamlTrees.parseFile(file, label);
        Entry baseEntry = own.entry(BASE_KEY);
        if (baseEntry == null) {
            chain.remove(chain.size() - 1);
            return own;
        }
        if (!(baseEntry.value() instanceof Scalar s) || !(s.value() instanceof String baseName) || baseName.isBlank()) {
            throw new UserError(baseEntry.value().where().label(),
                    "base: must name one recipe file, but it is " + YamlNode.describe(baseEntry.value()),
                    "write e.g. 'base: ../common.yaml' (relative to this file)");
        }
        Path baseFile = YamlTrees.dirOf(file).resolve(baseName).normalize();
        String baseLabel = labelBeside(label, baseName);
        // A recipe from someone else must not make us read, and so quote in messages, a file that is not a recipe
        // (base: /etc/shadow, base: ../.env): only YAML files are ever opened, wherever they lie.
        if (!YamlTrees.yamlName(baseFile)) {
            throw new UserError(s.where().label(), "base: must name a .yaml or .yml recipe file, and '" + baseName
                    + "' is not one (it was not opened)", "base: names another recipe, relative to this file, e.g. "
                    + "'base: ../common.yaml'");
        }
        YamlTrees.requireYamlTarget(baseFile, s.where().label() + ": base: " + baseName);
        if (Files.isDirectory(baseFile)) {
            throw new UserError(s.where().label(), "base: '" + baseName + "' is a folder, not a recipe file (looked "
                    + "at " + baseFile + ")", "name the .yaml file inside it");
        }
        if (!Files.isRegularFile(baseFile)) {
            throw new UserError(s.where().label(), "base: file '" + baseName + "' does not exist (looked at "
                    + baseFile + ")", "base: paths are relative to the file that contains them");
        }
        if (chain.size() >= MAX_DEPTH) {
            throw new UserError(s.where().label(), "base: files inherit more than " + MAX_DEPTH + " levels deep (a "
                    + "chain this long is generated, not written)", "flatten the chain: finetune validate --flatten "
                    + "on a recipe near its end writes one file");
        }
        baseLines.add(s.where());
        Mapping base = loadWithBases(baseFile, baseLabel, chain, baseLines);
        baseLines.remove(baseLines.size() - 1);
        chain.remove(chain.size() - 1);
        Map<String, Entry> rest = new LinkedHashMap<>(own.entries());
        rest.remove(BASE_KEY);
        return merge(base, new Mapping(rest, own.where()));
    }

    /** Deep merge: mappings merge key by key, anything else in {@code top} replaces what {@code base} had. */
    static Mapping merge(Mapping base, Mapping top) {
        Map<String, Entry> merged = new LinkedHashMap<>(base.entries());
        for (Entry e : top.entries().values()) {
            Entry old = merged.get(e.key());
            if (old != null && old.value() instanceof Mapping oldMap && e.value() instanceof Mapping newMap) {
                merged.put(e.key(), new Entry(e.key(), e.keyWhere(), merge(oldMap, newMap)));
            } else {
                merged.put(e.key(), e);
            }
        }
        return new Mapping(merged, top.where());
    }

    /** How to name a base file in messages: beside the including file's label, as the user would type it. */
    private static String labelBeside(String label, String relative) {
        Path parent = Path.of(label).getParent();
        return (parent == null ? Path.of(relative) : parent.resolve(relative)).normalize().toString();
    }
}
