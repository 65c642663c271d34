package dev.finetune.cli;

import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.backend.RewardDryRun;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Spec;

/** {@code finetune rewards RECIPE --dry-run}: try a GRPO recipe's reward functions before training with them. */
@Command(name = "rewards", mixinStandardHelpOptions = true,
        description = "Score a few dataset rows with the recipe's GRPO reward functions, without training "
                + "(--dry-run, the only mode). The completions are sampled from the base model unless given.")
final class RewardsCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Mixin
    RecipeArgs recipeArgs;

    @Option(names = "--dry-run", description = "score and print; nothing is trained or written (the only mode)")
    boolean dryRun;

    @Option(names = "--rows", paramLabel = "N", defaultValue = "3", description = "dataset rows to score (default: ${DEFAULT-VALUE})")
    int rows;

    @Option(names = "--completion", paramLabel = "TEXT",
            description = "a completion to score for every row instead of sampling; repeat for several")
    List<String> completions = new ArrayList<>();

    @Option(names = "--samples", paramLabel = "N", defaultValue = "2",
            description = "completions to sample per row from the base model (default: ${DEFAULT-VALUE})")
    int samples;

    @Option(names = "--seed", paramLabel = "S", defaultValue = "0", description = "sampling seed (default: ${DEFAULT-VALUE})")
    long seed;

    @Option(names = "--allow-commands",
            description = "run reward commands named in the recipe (recipes are shared files: read them first)")
    boolean allowCommands;

    @Override
    public Integer call() {
        ValidatedRecipe validated = recipeArgs.load();
        ValidateCommand.printWarnings(spec.commandLine().getErr(), validated.warnings());
        PrintWriter out = spec.commandLine().getOut();
        List<RewardDryRun.Row> scored = RewardDryRun.run(validated.recipe(), rows, completions, samples, allowCommands, seed);
        for (RewardDryRun.Row row : scored) {
            out.println("prompt: " + quoted(row.prompt()) + (row.fields().size() > 0 ? "  fields: " + row.fields() : ""));
            for (RewardDryRun.Scored s : row.completions()) {
                StringBuilder parts = new StringBuilder();
                s.byFunction().forEach((label, value) -> parts.append(String.format(Locale.ROOT, " %s=%.3g", label, value)));
                out.printf(Locale.ROOT, "  reward %.3f [%s ] %s%n", s.total(), parts.toString().strip().isEmpty() ? ""
                        : parts.toString(), quoted(s.completion()));
            }
        }
        out.flush();
        return ExitCode.OK;
    }

    private static String quoted(String text) {
        String flat = text.replace("\n", "\\n");
        return "\"" + (flat.length() > 160 ? flat.substring(0, 157) + "..." : flat) + "\"";
    }
}
