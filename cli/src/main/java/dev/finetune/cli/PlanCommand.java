package dev.finetune.cli;

import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.MemoryPlan;
import dev.finetune.recipes.plan.PlanJson;
import dev.finetune.recipes.plan.PlanText;
import dev.finetune.recipes.plan.PrecisionRegime;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.backend.GemmRate;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

@Command(name = "plan", mixinStandardHelpOptions = true,
        description = {"Batch arithmetic and memory per device, term by term and phase by phase, without loading anything.",
            "Exit 0 when it fits, 2 when it does not (the plan then lists the changes that would make it fit)."})
final class PlanCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Mixin
    RecipeArgs recipeArgs;

    @ArgGroup(exclusive = true)
    Where where;

    static final class Where {
        @ArgGroup(exclusive = false)
        GpuOptions gpus;

        @Option(names = "--cpu", description = "plan for this machine's CPU and RAM")
        boolean cpu;
    }

    @Mixin
    RankOptions ranks = new RankOptions();

    @Option(names = "--model-config", paramLabel = "PATH",
            description = "config.json (or its directory) of a model the built-in table does not know")
    Path modelConfig;

    @Option(names = "--precision", paramLabel = "REGIME",
            description = "bytes per parameter: fp32, bf16 (pure), bf16-fp32-moments, mixed (fp32 master); default: what our trainers run")
    String precision;

    @Option(names = "--json", description = "print one JSON object instead of the table")
    boolean json;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        ValidatedRecipe validated = recipeArgs.load(ranks.shape(hardware()));
        ValidateCommand.printWarnings(spec.commandLine().getErr(), validated.warnings());
        RunPlan run = runPlan(validated, recipeArgs.recipe(), modelConfig, regime(),
                validated.run().device() == ResolvedRun.Device.CPU ? GemmRate.ENGINE : null);
        MemoryPlan plan = run.memory();
        if (json) {
            out.println(PlanJson.render(run));
        } else {
            out.print(validated.describe());
            out.println();
            out.print(PlanText.render(plan));
            out.println();
            out.print(run.describeTime());
        }
        return plan.estimate().fits() ? ExitCode.OK : ExitCode.BAD_INPUT;
    }

    /**
     * The memory plan of a validated recipe: the one path from a recipe to its estimate, shared by {@code plan} and
     * by the check that runs before any training.
     *
     * @param modelConfig a config.json for a model the built-in table does not know, or {@code null}
     * @param regime {@code null} for what our trainers run
     */
    static MemoryPlan memoryPlan(ValidatedRecipe validated, Path recipe, Path modelConfig, PrecisionRegime regime) {
        return runPlan(validated, recipe, modelConfig, regime, null).memory();
    }

    /** Memory and time; {@code cpu} measures this machine when the run is on CPU ({@code null}: no time there). */
    static RunPlan runPlan(ValidatedRecipe validated, Path recipe, Path modelConfig, PrecisionRegime regime,
            RunPlan.CpuRate cpu) {
        return RunPlan.of(validated, recipe.toAbsolutePath().normalize().getParent(), modelConfig, regime, cpu);
    }

    /** The hardware flags: the GPUs given, this machine's CPU, or the recipe's own {@code hardware:}. */
    private LaunchShape hardware() {
        if (where == null) {
            return LaunchShape.RECIPE;
        }
        return where.cpu ? new LaunchShape(null, null, null, null, null, true) : where.gpus.shape();
    }

    private PrecisionRegime regime() {
        if (precision == null) {
            return null;
        }
        return switch (precision.toLowerCase(Locale.ROOT)) {
            case "fp32" -> PrecisionRegime.FP32;
            case "bf16", "bf16-pure" -> PrecisionRegime.BF16_PURE;
            case "bf16-fp32-moments" -> PrecisionRegime.BF16_FP32_MOMENTS;
            case "mixed" -> PrecisionRegime.MIXED_FP32_MASTER;
            default -> throw new UserError("--precision", "unknown precision regime '" + precision + "'",
                    "use fp32, bf16, bf16-fp32-moments or mixed");
        };
    }
}
