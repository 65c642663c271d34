package dev.finetune.cli;

import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.backend.fsdp.Launch;
import dev.finetune.trainers.backend.fsdp.SlurmScript;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

@Command(name = "launch", mixinStandardHelpOptions = true,
        description = "Write the sbatch script that runs a recipe on the fsdp backend over Slurm nodes.")
final class LaunchCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Mixin
    RecipeArgs recipeArgs = new RecipeArgs();

    @Option(names = "--slurm", required = true, description = "write an sbatch script (the only launcher so far)")
    boolean slurm;

    @Option(names = "--out", paramLabel = "FILE", description = "where to write it (default: output_dir/launch.sbatch)")
    Path out;

    @Option(names = "--cpus-per-task", paramLabel = "N", description = "#SBATCH --cpus-per-task: the CPUs each "
            + "node's launcher and its ranks get (default: every CPU the job holds on the node; the ranks share them)")
    Integer cpusPerTask;

    @Mixin
    LaunchOptions launchOptions = new LaunchOptions();

    @Override
    public Integer call() {
        // resolved as each node's launcher will run it: the script adds backend=fsdp
        List<String> asRun = new ArrayList<>(recipeArgs.overrides);
        asRun.add("backend=fsdp");
        ValidatedRecipe validated = ValidatedRecipe.load(recipeArgs.recipe(), asRun, launchOptions.shape());
        ValidateCommand.printWarnings(spec.commandLine().getErr(), validated.warnings());
        Launch launch = launchOptions.launch(validated.run());
        Path outputDir = Path.of(validated.recipe().output().outputDir());
        String home = System.getProperty("finetune.home");
        String launcher = home != null ? Path.of(home).resolve("finetune").toAbsolutePath().toString() : "finetune";
        String script = SlurmScript.render(launcher, recipeArgs.recipe().toAbsolutePath(), recipeArgs.overrides,
                launch, "finetune-" + outputDir.getFileName(), outputDir, cpusPerTask);
        Path file = out != null ? out : outputDir.resolve(dev.finetune.trainers.backend.OutputFolder.SBATCH);
        try {
            if (file.toAbsolutePath().getParent() != null) {
                Files.createDirectories(file.toAbsolutePath().getParent());
            }
            Files.writeString(file, script);
            if (!file.toFile().setExecutable(true)) {
                throw new IOException("cannot mark it executable");
            }
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot write the sbatch script: " + e.getMessage(),
                    "choose another --out");
        }
        spec.commandLine().getOut().printf("wrote %s: %d node(s) x %d GPU(s); submit with: sbatch %s%n", file,
                launch.nnodes(), launch.nprocPerNode(), file);
        return ExitCode.OK;
    }
}
