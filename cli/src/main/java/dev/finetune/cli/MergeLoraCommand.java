package dev.finetune.cli;

import dev.finetune.trainers.backend.SavedModels;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/** {@code finetune merge-lora OUTPUT_DIR [--out DIR]}: a plain Hugging Face model with the adapter folded in. */
@Command(name = "merge-lora", mixinStandardHelpOptions = true,
        description = "Fold a trained LoRA adapter into its base model and write a full Hugging Face model folder.")
final class MergeLoraCommand implements Callable<Integer> {
    @Spec
    CommandSpec spec;

    @Parameters(index = "0", paramLabel = "OUTPUT_DIR", description = "The output_dir of a LoRA or QLoRA run.")
    Path adapterDir;

    @Option(names = "--out", paramLabel = "DIR", description = "Where the merged model goes (default: OUTPUT_DIR/merged).")
    Path out;

    @Override
    public Integer call() {
        Path target = out != null ? out : adapterDir.resolve("merged");
        SavedModels.mergeLora(adapterDir, target);
        spec.commandLine().getOut().println("merged " + adapterDir + " into " + target);
        spec.commandLine().getOut().flush();
        return ExitCode.OK;
    }
}
