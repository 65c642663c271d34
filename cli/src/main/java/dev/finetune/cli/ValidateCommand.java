package dev.finetune.cli;

import dev.finetune.recipes.Finding;
import dev.finetune.recipes.ValidatedRecipe;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

@Command(name = "validate", mixinStandardHelpOptions = true,
        description = "Check a recipe: every error at once with file:line:col and the fix. Exit 0 valid, 2 invalid.")
final class ValidateCommand implements Callable<Integer> {

    @Parameters(index = "0", paramLabel = "RECIPE", description = "the recipe YAML file")
    Path recipe;

    @Parameters(index = "1..*", arity = "0..*", paramLabel = "KEY=VALUE", description = "overrides, validated like file keys")
    List<String> overrides = new ArrayList<>();

    @Option(names = "--flatten", description = "print the resolved recipe as plain Axolotl YAML (no base:)")
    boolean flatten;

    @Override
    public Integer call() {
        ValidatedRecipe validated = ValidatedRecipe.load(recipe, overrides);
        printWarnings(validated.warnings());
        if (flatten) {
            Path dir = recipe.toAbsolutePath().normalize().getParent();
            System.out.print(validated.flatten(dir));
        } else {
            System.out.println("valid: " + recipe);
            System.out.print(validated.plan().describe());
        }
        return Main.OK;
    }

    static void printWarnings(List<Finding> warnings) {
        for (Finding w : warnings) {
            System.err.println("warning: " + w.oneLine());
        }
    }
}
