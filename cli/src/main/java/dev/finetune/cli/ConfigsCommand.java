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
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

@Command(name = "configs", mixinStandardHelpOptions = true,
        description = "The shipped recipe library: ls | cat NAME | cp NAME FILE [--force].")
final class ConfigsCommand implements Callable<Integer> {

    @Parameters(index = "0", paramLabel = "ACTION", defaultValue = "ls", description = "ls, cat or cp")
    String action;

    @Parameters(index = "1..*", arity = "0..2", paramLabel = "ARG")
    List<String> args = List.of();

    @Option(names = "--force", description = "cp: overwrite an existing FILE")
    boolean force;

    @Spec
    CommandSpec spec;

    @Override
    public Integer call() throws IOException {
        PrintWriter out = spec.commandLine().getOut();
        Path root = library();
        switch (action) {
            case "ls" -> {
                for (String name : names(root)) {
                    out.printf("%-28s %s%n", name, purpose(root.resolve(name + ".yaml")));
                }
            }
            case "cat" -> out.print(Files.readString(recipe(root, arg(0, "cat NAME"))));
            case "cp" -> {
                Path source = recipe(root, arg(0, "cp NAME FILE"));
                Path target = Path.of(arg(1, "cp NAME FILE"));
                if (Files.exists(target) && !force) {
                    throw new UserError(target.toString(), "already exists; not overwritten", "pass --force to overwrite it");
                }
                Path targetDir = target.toAbsolutePath().normalize().getParent();
                if (targetDir.equals(source.getParent())) {
                    Files.copy(source, target, StandardCopyOption.REPLACE_EXISTING);
                } else {
                    // Local data and model paths are relative to the recipe file: written elsewhere, they must be
                    // re-pointed, which the flattened form does. The header comment travels along.
                    String header = Files.readAllLines(source).stream().takeWhile(l -> l.startsWith("#"))
                            .map(l -> l + "\n").collect(java.util.stream.Collectors.joining());
                    String flat = ValidatedRecipe.load(source, List.of()).flatten(targetDir);
                    Files.writeString(target, header + flat);
                }
                out.println("copied " + arg(0, "") + " to " + target);
            }
            default -> throw new UserError("configs " + action, "unknown action", "use ls, cat NAME or cp NAME FILE");
        }
        return Main.OK;
    }

    private String arg(int i, String usage) {
        if (args.size() <= i) {
            throw new UserError("configs " + action, "missing argument", "usage: finetune configs " + usage);
        }
        return args.get(i);
    }

    private static Path recipe(Path root, String name) {
        String clean = name.endsWith(".yaml") ? name.substring(0, name.length() - 5) : name;
        Path file = root.resolve(clean + ".yaml").normalize();
        if (!file.startsWith(root) || !Files.isRegularFile(file)) {
            throw new UserError("configs " + name, "no such recipe in the library", "'finetune configs ls' lists them");
        }
        return file;
    }

    static List<String> names(Path root) throws IOException {
        try (Stream<Path> files = Files.walk(root)) {
            return files.filter(p -> p.toString().endsWith(".yaml"))
                    .map(p -> root.relativize(p).toString())
                    .filter(p -> !p.startsWith("models/") && !p.startsWith("data/"))
                    .map(p -> p.substring(0, p.length() - 5))
                    .sorted()
                    .toList();
        }
    }

    /** The first comment line of a recipe: what it is for. */
    private static String purpose(Path file) {
        try (Stream<String> lines = Files.lines(file)) {
            return lines.filter(l -> l.startsWith("#")).findFirst().map(l -> l.replaceFirst("^#\\s*", "")).orElse("");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
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
