package dev.finetune.cli;

import dev.finetune.recipes.Finding;
import dev.finetune.recipes.FinetuneVersion;
import dev.finetune.recipes.InvalidRecipe;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.model.ModelSource;
import dev.finetune.recipes.plan.MemoryEstimate;
import dev.finetune.recipes.plan.MemoryPlan;
import dev.finetune.recipes.plan.PlanText;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.backend.GemmRate;
import dev.finetune.trainers.backend.SingleDeviceBackend;
import dev.finetune.trainers.backend.fsdp.FsdpBackend;
import dev.finetune.trainers.backend.fsdp.Launch;
import dev.finetune.trainers.backend.fsdp.WorkerPython;
import dev.finetune.trainers.hub.RunInputs;
import dev.finetune.trainers.train.StopRequest;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.AutoComplete;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** Entry point; the only place that calls {@link System#exit}. Exit codes: 0 ok, 1 run failed, 2 bad input. */
@Command(
        name = "finetune",
        mixinStandardHelpOptions = true,
        versionProvider = Main.Version.class,
        description = "Fine-tune large language models from one YAML recipe.%n"
                + "With a recipe and no command: validate it, print the batch plan, then train.",
        footerHeading = "%nExamples:%n",
        footer = {
            "  finetune configs cp quickstart.yaml my.yaml        copy a shipped recipe to start from",
            "  finetune validate my.yaml                          every error at once, file:line, exit 2",
            "  finetune plan my.yaml --gpus 8 --gpu-memory 80GiB  batch arithmetic and memory per device",
            "  finetune my.yaml learning_rate=1e-4 lora_r=32      validate, plan, train with overrides",
            "  finetune generate out/my --prompt \"Once upon\"     try the result (an output or checkpoint-N folder)",
            "  finetune merge-lora out/my                         fold the adapter into the base weights",
            "  finetune my.yaml backend=fsdp --nproc-per-node 8   FSDP2 over 8 GPUs (torchrun; --dry-run to see it)",
            "  finetune download my.yaml                          fetch its hub model and datasets ahead (HF cache)",
            "  source <(finetune generate-completion)             tab completion in bash or zsh",
        },
        exitCodeListHeading = "%nExit codes:%n",
        exitCodeList = {
            "0:done",
            "1:the run failed (our error: the message and a stack trace say where)",
            "2:bad input (recipe, data, flags): one line naming the file and line or key, and a hint",
        })
public final class Main implements Callable<Integer> {

    /** {@code --version}: the build's version, from the one place it is written. */
    static final class Version implements CommandLine.IVersionProvider {
        @Override
        public String[] getVersion() {
            return new String[] {"finetune " + FinetuneVersion.get()};
        }
    }

    @Spec
    CommandSpec spec;

    @Mixin
    RecipeArgs recipeArgs;

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        if (!recipeArgs.given()) {
            // nothing to do is a usage error: a script that forgot its recipe must not read as a success
            spec.commandLine().usage(spec.commandLine().getErr());
            spec.commandLine().getErr().println("error: no recipe given (hint: finetune RECIPE.yaml to train, or a "
                    + "command such as finetune validate RECIPE.yaml; see the usage above)");
            return ExitCode.BAD_INPUT;
        }
        ValidatedRecipe validated = recipeArgs.load(launchOptions.shape());
        ValidateCommand.printWarnings(spec.commandLine().getErr(), validated.warnings());
        out.print(validated.describe());
        // what the trainer refuses, validation refused (RunChecks), before the memory is even estimated
        boolean fsdp = validated.run().backend() == ResolvedRun.Backend.FSDP;
        if (!fsdp) {
            launchOptions.requireUnused();
            warnOfAnUndeclaredGpu(validated);
        }
        // the fit check before the weights' download (a recipe that cannot fit transfers nothing big); a dry run
        // downloads nothing and plans from what the cache or the built-in table holds
        if (!launchOptions.dryRun) {
            boolean configAtHand = !(RunPlan.source(validated, recipeArgs.recipe().toAbsolutePath().normalize()
                    .getParent(), null) instanceof ModelSource.Unknown);
            RunInputs.fetchConfig(validated.recipe(), configAtHand);
            if (!configAtHand) {
                // validate could not read the model's shape (only the hub had it); the checks that need it (LoRA
                // target names, resize_token_embeddings_to_32x) run now, before any weight is fetched or written
                validated = recipeArgs.load(launchOptions.shape());
            }
        }
        RunPlan run = requireFits(validated);
        if (!launchOptions.dryRun) {
            RunInputs.fetch(validated.recipe(), out);
        }
        MemoryPlan plan = run.memory();
        if (fsdp) {
            // the sharded terms, all-gather and reduce-scatter buffers and the per-rank peak, before anything starts
            out.print(PlanText.render(plan));
            return trainFsdp(validated, run);
        }
        if (launchOptions.dryRun) {
            out.println("dry run: nothing started");
            return ExitCode.OK;
        }
        return dispatchTraining(validated, run);
    }

    @CommandLine.Mixin
    LaunchOptions launchOptions = new LaunchOptions();

    /**
     * A recipe without {@code hardware:} trains in this JVM on the CPU; on a machine with an NVIDIA GPU that is rarely
     * what its user meant, so they hear it before training starts. (The JVM does not ask the worker's torch: that
     * would start Python on every CPU run; the driver's device list costs a directory read.)
     */
    private void warnOfAnUndeclaredGpu(ValidatedRecipe validated) {
        if (!(validated.recipe().hardware() instanceof dev.finetune.recipes.Recipe.Hardware.Unspecified)) {
            return;
        }
        int gpus = nvidiaGpus(Path.of("/proc/driver/nvidia/gpus"));
        if (gpus > 0) {
            spec.commandLine().getErr().println("warning: this machine has " + gpus + " NVIDIA GPU(s) and the recipe "
                    + "declares no hardware: it trains on the CPU in this JVM (hint: hardware={gpus: 1, gpu_memory: "
                    + "80GiB} on the command line trains on one GPU with the torch worker)");
        }
    }

    /** The GPUs the NVIDIA driver lists (one folder each), 0 where there is no such driver. */
    static int nvidiaGpus(Path driverList) {
        try (java.util.stream.Stream<Path> entries = java.nio.file.Files.list(driverList)) {
            return (int) entries.count();
        } catch (java.io.IOException | RuntimeException e) {
            return 0;
        }
    }

    /** {@code backend: fsdp}: torchrun and the Python worker; {@code --dry-run} only prints what would start. */
    private int trainFsdp(ValidatedRecipe validated, RunPlan run) {
        PrintWriter out = spec.commandLine().getOut();
        Launch launch = launchOptions.launch(validated.run());
        if (launch.dryRun()) {
            out.print(FsdpBackend.dryRun(validated, launch, WorkerPython.find(launch.python(), System.getenv(),
                    System.getProperty("finetune.home"))));
            return ExitCode.OK;
        }
        FsdpBackend.Result result = FsdpBackend.train(validated,
                new FsdpBackend.Settings(launch, run, out, java.util.Map.of(), allowCommands));
        if (!Double.isNaN(result.firstEvalLoss())) {
            // GRPO's loss starts at exactly 0 (policy = sampler, advantages centred): no relative change to print
            out.printf(Locale.ROOT, "eval loss: %.4f -> %.4f%s%n", result.firstEvalLoss(), result.lastEvalLoss(),
                    result.firstEvalLoss() == 0 ? "" : String.format(Locale.ROOT, " (%+.1f%%)",
                            100 * (result.lastEvalLoss() / result.firstEvalLoss() - 1)));
        }
        out.printf(Locale.ROOT, "saved %s to %s%n", String.join(", ", result.savedFiles()), result.outputDir());
        return ExitCode.OK;
    }

    /** Refuses, before anything is loaded or written, a recipe whose memory plan exceeds the device it names. */
    private RunPlan requireFits(ValidatedRecipe validated) {
        PrintWriter out = spec.commandLine().getOut();
        Path recipe = recipeArgs.recipe();
        // The engine loads for training anyway; measuring this CPU first costs a few tens of milliseconds.
        boolean jvmOnCpu = validated.run().backend() == ResolvedRun.Backend.SINGLE
                && validated.run().device() == ResolvedRun.Device.CPU;
        RunPlan run = PlanCommand.runPlan(validated, recipe, null, null, jvmOnCpu ? GemmRate.ENGINE : null);
        MemoryPlan plan = run.memory();
        MemoryEstimate estimate = plan.estimate();
        double gib = 1024.0 * 1024.0 * 1024.0;
        out.printf(Locale.ROOT, "memory: peak %.2f GiB per device in %s, capacity %.1f GiB: %s%n",
                estimate.peakBytes() / gib, estimate.peakPhase().label(), estimate.capacityBytes() / gib,
                estimate.fits() ? "fits" : "does not fit");
        if (!estimate.fits()) {
            out.println();
            out.print(PlanText.render(plan));
            String fix = plan.remedies().isEmpty() ? "no change we know of fits this device: use a larger one or a smaller model (the plan above shows the largest terms)"
                    : "for example: " + plan.remedies().get(0).change() + " (the plan above ranks every change that fits)";
            throw new UserError(recipe.toString(), String.format(Locale.ROOT,
                    "does not fit: peak %.1f GiB per device exceeds %.1f GiB by %.1f GiB",
                    estimate.peakBytes() / gib, estimate.capacityBytes() / gib, -estimate.headroomBytes() / gib), fix);
        }
        out.print(run.describeTime());
        return run;
    }

    @Option(names = "--sample-prompt", paramLabel = "TEXT",
            description = "Prompt of the greedy sample printed before and after training (default: taken from the data).")
    String samplePrompt;

    @Option(names = "--allow-commands",
            description = "Let GRPO reward commands named in the recipe run (recipes are shared files: read them first).")
    boolean allowCommands;

    /** Trains in this JVM; the backend refuses sharded recipes before doing any work. */
    int dispatchTraining(ValidatedRecipe validated, RunPlan plan) {
        SingleDeviceBackend.train(validated, new SingleDeviceBackend.Settings(samplePrompt, allowCommands,
                spec.commandLine().getOut(), plan));
        return ExitCode.OK;
    }

    public static int execute(String... args) {
        return execute(null, null, args);
    }

    /**
     * Runs the command line with its output going to {@code out} and {@code err} (the process's streams when
     * {@code null}): what {@link #main} does, minus the exit, so a caller can run many commands in one JVM.
     */
    public static int execute(PrintWriter out, PrintWriter err, String... args) {
        CommandLine cli = new CommandLine(new Main());
        for (Class<?> command : subcommandsFor(args)) {
            cli.addSubcommand(command);
        }
        if (out != null) {
            cli.setOut(out);
        }
        if (err != null) {
            cli.setErr(err);
        }
        cli.setExecutionExceptionHandler((e, commandLine, parseResult) -> {
            if (e instanceof UserError error) {
                PrintWriter errors = commandLine.getErr();
                if (error instanceof InvalidRecipe invalid) {
                    for (Finding f : invalid.errors()) {
                        errors.println("error: " + f.oneLine());
                    }
                    for (Finding f : invalid.warnings()) {
                        errors.println("warning: " + f.oneLine());
                    }
                } else {
                    errors.println("error: " + error.oneLine());
                }
                errors.flush();
                return ExitCode.BAD_INPUT;
            }
            if (e instanceof FsdpBackend.WorkerFailed failed) {
                // The rank's own traceback is already printed above, tagged with its rank and host.
                commandLine.getErr().println("error: run failed: " + failed.getMessage());
                commandLine.getErr().flush();
                return ExitCode.RUN_FAILED;
            }
            if (e instanceof StopRequest.Stopped stopped) {
                commandLine.getErr().println(stopped.getMessage());
                return 128 + signalNumber(stopped.signal());
            }
            // Anything else is our failure, not the user's: say so and keep the trace for the bug report.
            commandLine.getErr().println("error: run failed: " + e);
            e.printStackTrace(commandLine.getErr());
            return ExitCode.RUN_FAILED;
        });
        try {
            return cli.execute(args);
        } finally {
            cli.getOut().flush();
            cli.getErr().flush();
        }
    }

    /** Every subcommand, in the order the help lists them (a method: naming a class loads it). */
    static List<Class<?>> allSubcommands() {
        return List.of(ValidateCommand.class, PlanCommand.class, DiffCommand.class, ConfigsCommand.class,
                GenerateCommand.class, MergeLoraCommand.class, BenchGenerateCommand.class, BenchTrainCommand.class,
                RewardsCommand.class, PreprocessCommand.class, LaunchCommand.class, DownloadCommand.class, AutoComplete.GenerateCompletion.class);
    }

    /** The commands that answer at once: the launcher's quick commands. */
    static final List<String> QUICK = List.of("validate", "plan", "diff", "configs");

    static Class<?> quick(String name) {
        return switch (name) {
            case "validate" -> ValidateCommand.class;
            case "plan" -> PlanCommand.class;
            case "diff" -> DiffCommand.class;
            case "configs" -> ConfigsCommand.class;
            default -> null;
        };
    }

    /**
     * picocli builds each registered command's model by reflection over its options and mixins, and its own classes
     * cannot go into the launcher's class-data archive (they are Java 5 bytecode), so registering all twelve commands
     * was a good part of {@code validate}'s start-up. A quick command gets only itself; anything else (help, a recipe,
     * the completion script that lists them all) gets every command.
     */
    static List<Class<?>> subcommandsFor(String... args) {
        Class<?> quick = args.length > 0 ? quick(args[0]) : null;
        return quick != null ? List.of(quick) : allSubcommands();
    }

    public static void main(String[] args) {
        for (String signal : List.of("TERM", "INT", "HUP")) {
            onSignal(signal);
        }
        System.exit(execute(args));
    }

    /**
     * A training run stops at the next step boundary with a checkpoint (clusters send SIGTERM before they kill);
     * anything else, or a second signal, ends the process at once, saying so: a checkpoint being written then is
     * lost whole, never half, because checkpoints are published by renaming.
     */
    private static void onSignal(String name) {
        try {
            sun.misc.Signal.handle(new sun.misc.Signal(name), signal -> {
                if (StopRequest.request(name)) {
                    System.err.println("SIG" + name + ": stopping after the current step, with a checkpoint (send it "
                            + "again to stop at once)");
                    return;
                }
                String newest = StopRequest.newestCheckpoint();
                System.err.println("stopped by SIG" + name + (!StopRequest.training()
                        ? " outside a training step: nothing was saved"
                        : newest == null ? " at once (a second signal), before this run saved any checkpoint"
                        : " at once (a second signal): the newest complete checkpoint, " + newest + ", is intact"));
                System.err.flush();
                Runtime.getRuntime().halt(128 + signalNumber(name));
            });
        } catch (IllegalArgumentException e) {
            // a platform without this signal: the default behaviour stays
        }
    }

    private static int signalNumber(String name) {
        return switch (name) {
            case "INT" -> 2;
            case "TERM" -> 15;
            case "HUP" -> 1;
            default -> 1;
        };
    }
}
