package dev.finetune.cli;

import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.ValidatedRecipe;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * The RECIPE parameter and the KEY=VALUE overrides after it, for every command that reads one recipe. The recipe
 * is optional here because {@code finetune} alone prints its usage; commands that need one call {@link #load}.
 */
final class RecipeArgs {

    @Spec(Spec.Target.MIXEE)
    CommandSpec spec;

    @Parameters(index = "0", arity = "0..1", paramLabel = "RECIPE", description = "the recipe YAML file")
    Path recipe;

    @Parameters(index = "1..*", arity = "0..*", paramLabel = "KEY=VALUE",
            description = "overrides, e.g. learning_rate=1e-4 trl.beta=0.1, validated like keys in the file")
    List<String> overrides = new ArrayList<>();

    boolean given() {
        return recipe != null;
    }

    /** The recipe file; a usage error (exit 2 with the usage) when it was not given. */
    Path recipe() {
        if (recipe == null) {
            throw new ParameterException(spec.commandLine(), "Missing required parameter: 'RECIPE'");
        }
        return recipe;
    }

    /** Reads, resolves and validates the recipe with its overrides; every error at once as an InvalidRecipe. */
    ValidatedRecipe load() {
        return load(LaunchShape.RECIPE);
    }

    /** The same, resolved for the command line's launch or hardware flags. */
    ValidatedRecipe load(LaunchShape shape) {
        return ValidatedRecipe.load(recipe(), overrides, shape);
    }
}
