package dev.finetune.cli;

import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

@Command(name = "configs", mixinStandardHelpOptions = true,
        description = {"A recipe library: ls | cat NAME | cp NAME FILE [--force].",
            "The shipped one, or a folder of your own (--dir, or the environment variable " + ConfigsCommand.ENV
                    + "); each recipe's first comment line is its description."})
final class ConfigsCommand implements Callable<Integer> {

    /** Names the default library folder, e.g. a team's recipe repository. */
    static final String ENV = "FINETUNE_CONFIGS";

    @Parameters(index = "0", paramLabel = "ACTION", defaultValue = "ls", description = "ls, cat or cp")
    String action;

    @Parameters(index = "1..*", arity = "0..2", paramLabel = "ARG")
    List<String> args = List.of();

    @Option(names = "--force", description = "cp: overwrite an existing FILE")
    boolean force;

    @Option(names = "--dir", paramLabel = "DIR",
            description = "the library folder (default: $" + ENV + ", else the shipped configs/)")
    Path dir;

    @Spec
    CommandSpec spec;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        Path root = root();
        try {
            switch (action) {
                case "ls" -> {
                    for (Map.Entry<String, Path> e : recipes(root).entrySet()) {
                        boolean fragment = RecipeFiles.isFragment(e.getValue());
                        out.printf("%-28s %s%s%n", e.getKey(), fragment ? "(fragment) " : "", purpose(e.getValue()));
                    }
                }
                case "cat" -> out.print(dev.finetune.recipes.BoundedFiles.readText(recipe(root, arg(0, "cat NAME")),
                        4 << 20, "the recipe"));
                case "cp" -> {
                    Path source = recipe(root, arg(0, "cp NAME FILE"));
                    Path target = Path.of(arg(1, "cp NAME FILE"));
                    if (Files.exists(target) && !force) {
                        throw new UserError(target.toString(), "already exists; not overwritten", "pass --force to overwrite it");
                    }
                    Path targetDir = target.toAbsolutePath().normalize().getParent();
                    if (targetDir.equals(source.getParent()) || RecipeFiles.isFragment(source)) {
                        Files.copy(source, target, StandardCopyOption.REPLACE_EXISTING);
                    } else {
                        // Local data and model paths are relative to the recipe file: written elsewhere, they must be
                        // re-pointed, which the flattened form does. The header comment travels along.
                        String header = dev.finetune.recipes.BoundedFiles.readText(source, 4 << 20, "the recipe").lines()
                                .takeWhile(l -> l.startsWith("#"))
                                .map(l -> l + "\n").collect(java.util.stream.Collectors.joining());
                        String flat = ValidatedRecipe.load(source, List.of()).flatten(targetDir);
                        Files.writeString(target, header + flat);
                    }
                    out.println("copied " + arg(0, "") + " to " + target);
                }
                default -> throw new UserError("configs " + action, "unknown action", "use ls, cat NAME or cp NAME FILE");
            }
        } catch (IOException | UncheckedIOException e) {
            // a full disk, a folder it may not read or write: one line, never a stack trace
            Throwable cause = e instanceof UncheckedIOException u && u.getCause() != null ? u.getCause() : e;
            throw new UserError("configs " + action, cause.getClass().getSimpleName().replace("Exception", "")
                    .replaceAll("([a-z])([A-Z])", "$1 $2").toLowerCase(java.util.Locale.ROOT) + ": " + cause.getMessage(),
                    "check the folders' permissions and free space");
        }
        return ExitCode.OK;
    }

    private String arg(int i, String usage) {
        if (args.size() <= i) {
            throw new UserError("configs " + action, "missing argument", "usage: finetune configs " + usage);
        }
        return args.get(i);
    }

    private static Path recipe(Path root, String name) throws IOException {
        String clean = name.replaceFirst("\\.(yaml|yml)$", "");
        Path file = recipes(root).get(clean);
        if (file == null) {
            throw new UserError("configs " + name, "no such recipe in " + root, "'finetune configs ls' lists them");
        }
        return file;
    }

    /** The library's recipes by name (path below the root without the extension), sorted; data and models left out. */
    static Map<String, Path> recipes(Path root) throws IOException {
        Map<String, Path> recipes = new TreeMap<>();
        // A library is a few folders of recipes: the walk is bounded in depth and size, and what it may not read is
        // passed over, so --dir / answers at once with one line instead of walking (and failing on) the disk.
        int[] visited = {0};
        Files.walkFileTree(root, java.util.Set.of(), LIBRARY_DEPTH, new java.nio.file.SimpleFileVisitor<>() {
            @Override
            public java.nio.file.FileVisitResult preVisitDirectory(Path dir,
                    java.nio.file.attribute.BasicFileAttributes attributes) {
                String name = root.relativize(dir).toString();
                return name.startsWith(".") || name.contains("/.") || name.equals("models") || name.equals("data")
                        ? java.nio.file.FileVisitResult.SKIP_SUBTREE : java.nio.file.FileVisitResult.CONTINUE;
            }

            @Override
            public java.nio.file.FileVisitResult visitFile(Path p, java.nio.file.attribute.BasicFileAttributes attributes) {
                if (++visited[0] > LIBRARY_FILES) {
                    throw new UserError(root.toString(), "holds more than " + LIBRARY_FILES + " files within "
                            + LIBRARY_DEPTH + " levels: not a recipe library", "give --dir the folder of your recipes");
                }
                String name = root.relativize(p).toString().replace('\\', '/');
                if (attributes.isRegularFile() && (name.endsWith(".yaml") || name.endsWith(".yml"))
                        && !name.startsWith(".") && !name.contains("/.")) {
                    recipes.putIfAbsent(name.replaceFirst("\\.(yaml|yml)$", ""), p);
                }
                return java.nio.file.FileVisitResult.CONTINUE;
            }

            @Override
            public java.nio.file.FileVisitResult visitFileFailed(Path p, IOException e) {
                return java.nio.file.FileVisitResult.CONTINUE; // unreadable: not one of the library's recipes
            }

            @Override
            public java.nio.file.FileVisitResult postVisitDirectory(Path dir, IOException e) {
                return java.nio.file.FileVisitResult.CONTINUE; // a folder listed only in part: the same
            }
        });
        return recipes;
    }

    private static final int LIBRARY_DEPTH = 4;
    private static final int LIBRARY_FILES = 10_000;

    /** The first comment line of a recipe (the fragment marker aside): what it is for. */
    private static String purpose(Path file) {
        try (dev.finetune.recipes.BoundedFiles.Lines lines = new dev.finetune.recipes.BoundedFiles.Lines(file,
                4 << 20, "the recipe")) {
            for (dev.finetune.recipes.BoundedFiles.Lines.Line line; (line = lines.next()) != null; ) {
                String text = line.text();
                if (text != null && text.startsWith("#") && !RecipeFiles.isMarker(text)) {
                    return text.replaceFirst("^#\\s*", "");
                }
            }
            return "";
        } catch (IOException | RuntimeException e) {
            return "";
        }
    }

    /** {@code --dir}, else {@code $FINETUNE_CONFIGS}, else the shipped library. */
    private Path root() {
        String env = System.getenv(ENV);
        Path chosen = dir != null ? dir : env != null && !env.isBlank() ? Path.of(env) : null;
        if (chosen == null) {
            return library();
        }
        if (!Files.isDirectory(chosen)) {
            throw new UserError(chosen.toString(), "recipe library folder not found", dir != null
                    ? "give an existing folder to --dir" : "point " + ENV + " at an existing folder, or unset it");
        }
        return chosen.toAbsolutePath().normalize();
    }

    /**
     * The {@code configs/} folder: {@code -Dfinetune.home} (set by the launcher), else the first ancestor of this
     * jar or class folder that holds one, so tests and a plain {@code java -jar} find it too.
     */
    static Path library() {
        String home = System.getProperty("finetune.home");
        if (home != null && Files.isDirectory(Path.of(home, "configs"))) {
            return Path.of(home, "configs").toAbsolutePath().normalize();
        }
        try {
            Path here = Path.of(ConfigsCommand.class.getProtectionDomain().getCodeSource().getLocation().toURI());
            for (Path p = here; p != null; p = p.getParent()) {
                if (Files.isRegularFile(p.resolve("configs/quickstart.yaml"))) {
                    return p.resolve("configs").toAbsolutePath().normalize();
                }
            }
        } catch (URISyntaxException | SecurityException e) {
            // fall through to the error below
        }
        throw new UserError("configs", "cannot find the recipe library", "run through ./finetune, or pass -Dfinetune.home=<repo>");
    }
}
