package dev.finetune.cli;

import dev.finetune.recipes.BoundedFiles;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * The recipe files that {@code validate PATH…} checks: files as given, folders searched recursively for
 * {@code *.yaml} and {@code *.yml} (in path order, skipping folders whose name starts with a dot such as
 * {@code .git} or {@code .github}).
 *
 * <p>A file whose leading comment block holds the line {@code # finetune: fragment} is a piece for other recipes'
 * {@code base:}, not a recipe: it is listed but not validated on its own (it is checked, merged, through every recipe
 * that names it). A comment, not a key, because Axolotl and every other YAML tool must read the file unchanged.
 */
final class RecipeFiles {
    /** No recipe line is longer than a recipe file may be (YamlTrees' bound). */
    private static final int RECIPE_BYTES = 4 << 20;

    /** The marker, as written in a fragment's leading comments. */
    static final String FRAGMENT_MARKER = "# finetune: fragment";
    private static final Pattern MARKER = Pattern.compile("#\\s*finetune:\\s*fragment\\s*");

    /** One file to check, or a fragment to skip. */
    record Entry(Path path, boolean fragment) {}

    private RecipeFiles() {}

    /** Files first in argument order, each folder's files sorted by path; a file reached twice is listed once. */
    static List<Entry> expand(List<Path> paths) {
        List<Entry> entries = new ArrayList<>();
        Set<Path> seen = new HashSet<>();
        for (Path given : paths) {
            if (Files.isDirectory(given)) {
                for (Path file : yamlFilesUnder(given)) {
                    add(entries, seen, file);
                }
            } else if (Files.isRegularFile(given)) {
                add(entries, seen, given);
            } else if (Files.exists(given)) {
                // a device or a pipe (/dev/zero) may never end: it is not read at all
                throw new UserError(given.toString(), "not a regular file (a device or a pipe), so it cannot be a "
                        + "recipe", "save the recipe to a .yaml file and pass that");
            } else {
                throw new UserError(given.toString(), "no such file or folder",
                        "give recipe files, or folders holding *.yaml or *.yml recipes");
            }
        }
        return entries;
    }

    private static void add(List<Entry> entries, Set<Path> seen, Path file) {
        if (seen.add(file.toAbsolutePath().normalize())) {
            entries.add(new Entry(file, isFragment(file)));
        }
    }

    private static List<Path> yamlFilesUnder(Path dir) {
        try (Stream<Path> walk = Files.walk(dir)) {
            return walk.filter(p -> !hiddenBelow(dir, p))
                    .filter(p -> {
                        String name = p.getFileName().toString().toLowerCase(Locale.ROOT);
                        return (name.endsWith(".yaml") || name.endsWith(".yml")) && Files.isRegularFile(p);
                    })
                    .sorted()
                    .toList();
        } catch (IOException e) {
            throw new UserError(dir.toString(), "cannot list the folder: " + e.getMessage(), "check its permissions");
        } catch (UncheckedIOException e) {
            throw new UserError(dir.toString(), "cannot list the folder: " + e.getCause().getMessage(), "check its permissions");
        }
    }

    private static boolean hiddenBelow(Path root, Path p) {
        for (Path part : root.relativize(p)) {
            if (part.toString().startsWith(".")) {
                return true;
            }
        }
        return false;
    }

    /** Whether one line is the fragment marker (spaces are free: {@code #finetune:fragment} counts). */
    static boolean isMarker(String line) {
        return MARKER.matcher(line.strip()).matches();
    }

    /** Whether the comments before the first YAML line hold the fragment marker. */
    static boolean isFragment(Path file) {
        try (BoundedFiles.Lines lines = new BoundedFiles.Lines(file, RECIPE_BYTES, "the recipe")) {
            for (BoundedFiles.Lines.Line line; (line = lines.next()) != null; ) {
                if (line.text() == null) {
                    return false;
                }
                String text = line.text().strip();
                if (text.isEmpty() || text.equals("---")) {
                    continue;
                }
                if (!text.startsWith("#")) {
                    return false;
                }
                if (isMarker(text)) {
                    return true;
                }
            }
            return false;
        } catch (IOException | RuntimeException e) {
            // Unreadable, not text, a line beyond any recipe's size, a link to no recipe: validating it says why.
            return false;
        }
    }
}
