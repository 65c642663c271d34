package dev.finetune.cli;

import dev.finetune.cli.RecipeCheck.Verdict;
import dev.finetune.recipes.Finding;
import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.UserError;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

@Command(name = "validate", mixinStandardHelpOptions = true,
        description = {"Check recipes: every error of every file at once, with file:line:col and the fix.",
            "Folders are searched for *.yaml and *.yml; files marked '" + RecipeFiles.FRAGMENT_MARKER + "' in their "
                    + "leading comments are base: pieces and are skipped. Exit 0 when all are valid, 2 otherwise."})
final class ValidateCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Parameters(arity = "1..*", paramLabel = "PATH|KEY=VALUE",
            description = "recipe files and folders; KEY=VALUE overrides apply to every recipe, validated like file keys")
    List<String> arguments = new ArrayList<>();

    @Option(names = "--flatten", description = "print the resolved recipe as plain Axolotl YAML, keys sorted (no base:)")
    boolean flatten;

    @Option(names = "--plan", description = "also check that each recipe fits in memory on the hardware it declares "
            + "(or --gpus/--nodes/--gpu-memory)")
    boolean plan;

    @ArgGroup(exclusive = false)
    GpuOptions gpus;

    @Option(names = "--format", paramLabel = "FORMAT", defaultValue = "text",
            description = "text (default), json, junit (XML, a test case per recipe) or github (Actions annotations)")
    String format;

    @Override
    public Integer call() {
        ReportFormat report = ReportFormat.parse(format);
        List<Path> paths = new ArrayList<>();
        List<String> overrides = new ArrayList<>();
        for (String argument : arguments) {
            if (isOverride(argument)) {
                overrides.add(argument);
            } else {
                paths.add(Path.of(argument));
            }
        }
        if (paths.isEmpty()) {
            throw new UserError("validate", "no recipe file or folder given", "e.g. finetune validate recipes/");
        }
        if (gpus != null && !plan) {
            throw new UserError("--gpus/--nodes/--gpu-memory", "only mean something with --plan", "add --plan");
        }
        List<RecipeFiles.Entry> files = RecipeFiles.expand(paths);
        if (flatten) {
            return flatten(files, overrides, report);
        }
        LaunchShape shape = gpus != null ? gpus.shape() : LaunchShape.RECIPE;
        List<Verdict> verdicts = new ArrayList<>();
        for (RecipeFiles.Entry file : files) {
            verdicts.add(file.fragment() ? RecipeCheck.fragment(file.path())
                    : RecipeCheck.check(file.path(), overrides, shape, plan));
        }
        boolean single = paths.size() == 1 && Files.isRegularFile(paths.get(0));
        report.write(verdicts, single, spec.commandLine().getOut(), spec.commandLine().getErr());
        return verdicts.stream().anyMatch(v -> !v.fragment() && !v.valid()) ? ExitCode.BAD_INPUT : ExitCode.OK;
    }

    private int flatten(List<RecipeFiles.Entry> files, List<String> overrides, ReportFormat report) {
        if (files.size() != 1 || files.get(0).fragment() || report != ReportFormat.TEXT) {
            throw new UserError("--flatten", "prints one recipe as YAML", "give exactly one recipe file, without --format");
        }
        Path recipe = files.get(0).path();
        Verdict verdict = RecipeCheck.check(recipe, overrides, LaunchShape.RECIPE, false);
        PrintWriter err = spec.commandLine().getErr();
        TextReport.findings(verdict, err);
        if (!verdict.valid()) {
            return ExitCode.BAD_INPUT;
        }
        spec.commandLine().getOut().print(verdict.validated().flatten(recipe.toAbsolutePath().normalize().getParent()));
        return ExitCode.OK;
    }

    /**
     * {@code key=value} or {@code a.b=value} that names no existing file: an override, as for training. Any key
     * without a path separator counts, so a mistyped one (an invisible or non-ASCII character) is an unknown key
     * with a did-you-mean, not a missing file.
     */
    static boolean isOverride(String argument) {
        int eq = argument.indexOf('=');
        if (eq <= 0 || argument.substring(0, eq).contains("/")) {
            return false;
        }
        try {
            return !Files.exists(Path.of(argument));
        } catch (java.nio.file.InvalidPathException e) {
            return true;
        }
    }

    static void printWarnings(PrintWriter err, List<Finding> warnings) {
        for (Finding w : warnings) {
            err.println("warning: " + w.oneLine());
        }
        err.flush();
    }
}
