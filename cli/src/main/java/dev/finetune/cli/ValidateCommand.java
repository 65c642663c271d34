package dev.finetune.cli;

import dev.finetune.recipes.Finding;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

@Command(name = "validate", mixinStandardHelpOptions = true,
        description = "Check a recipe: every error at once with file:line:col and the fix. Exit 0 valid, 2 invalid.")
final class ValidateCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Mixin
    RecipeArgs recipeArgs;

    @Option(names = "--flatten", description = "print the resolved recipe as plain Axolotl YAML (no base:)")
    boolean flatten;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        Path recipe = recipeArgs.recipe();
        ValidatedRecipe validated = recipeArgs.load();
        printWarnings(spec.commandLine().getErr(), validated.warnings());
        if (flatten) {
            Path dir = recipe.toAbsolutePath().normalize().getParent();
            out.print(validated.flatten(dir));
        } else {
            out.println("valid: " + recipe);
            out.print(validated.plan().describe());
        }
        return Main.OK;
    }

    static void printWarnings(PrintWriter err, List<Finding> warnings) {
        for (Finding w : warnings) {
            err.println("warning: " + w.oneLine());
        }
        err.flush();
    }
}
