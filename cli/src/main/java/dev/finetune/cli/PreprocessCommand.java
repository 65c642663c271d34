package dev.finetune.cli;

import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.backend.DataDebug;
import dev.finetune.trainers.backend.OutputFolder;
import dev.finetune.trainers.backend.SingleDeviceBackend;
import dev.finetune.trainers.backend.fsdp.Preprocess;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
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

    @Option(names = "--debug", arity = "0..1", fallbackValue = "5", paramLabel = "N",
            description = "Print the first N examples (default 5) token by token, trained tokens as [text(id)], "
                    + "and how many tokens are trained on, as Axolotl's preprocess --debug does.")
    Integer debug;

    @Override
    public Integer call() {
        ValidatedRecipe validated = recipeArgs.load();
        ValidateCommand.printWarnings(spec.commandLine().getErr(), validated.warnings());
        if (debug != null) {
            DataDebug.print(validated, debug, System.console() != null, spec.commandLine().getOut());
        }
        if (validated.recipe().data().preparedPath() == null) {
            // the cache goes into output_dir/prepared: the folder rules of a run apply before anything is written
            OutputFolder.checkForPreprocess(Path.of(validated.recipe().output().outputDir()),
                    SingleDeviceBackend.inputs(validated));
        } else {
            OutputFolder.requireNoInput(Preprocess.folder(validated.recipe()), SingleDeviceBackend.inputs(validated));
        }
        Preprocess.run(validated, spec.commandLine().getOut());
        return ExitCode.OK;
    }
}
