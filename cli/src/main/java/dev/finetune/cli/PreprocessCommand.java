package dev.finetune.cli;

import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.backend.fsdp.Preprocess;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Spec;

@Command(name = "preprocess", mixinStandardHelpOptions = true,
        description = "Tokenize, mask and pack a recipe's data once into the file the fsdp workers read "
                + "(dataset_prepared_path, else output_dir/prepared); reused while data, settings and tokenizer stay "
                + "the same.")
final class PreprocessCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Mixin
    RecipeArgs recipeArgs = new RecipeArgs();

    @Override
    public Integer call() {
        ValidatedRecipe validated = recipeArgs.load();
        ValidateCommand.printWarnings(spec.commandLine().getErr(), validated.warnings());
        Preprocess.run(validated, spec.commandLine().getOut());
        return Main.OK;
    }
}
