package dev.finetune.cli;

import dev.finetune.recipes.UserError;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/** Entry point; the only place that calls {@link System#exit}. Exit codes: 0 ok, 1 run failed, 2 bad input. */
@Command(
        name = "finetune",
        mixinStandardHelpOptions = true,
        version = "finetune 0.1.0",
        description = "Fine-tune large language models from one YAML recipe.",
        subcommands = {GenerateCommand.class, BenchGenerateCommand.class})
public final class Main implements Runnable {

    public static final int OK = 0;
    public static final int RUN_FAILED = 1;
    public static final int BAD_INPUT = 2;

    @Override
    public void run() {
        CommandLine.usage(this, System.out);
    }

    public static int execute(String... args) {
        return new CommandLine(new Main()).setExecutionExceptionHandler(Main::failed).execute(args);
    }

    /** Bad input is the user's to fix: one line, exit 2. Anything else is our failure: the trace, exit 1. */
    private static int failed(Exception e, CommandLine command, CommandLine.ParseResult parsed) {
        if (e instanceof UserError userError) {
            command.getErr().println("finetune: " + userError.oneLine());
            return BAD_INPUT;
        }
        command.getErr().println("finetune: run failed: " + e);
        e.printStackTrace(command.getErr());
        return RUN_FAILED;
    }

    public static void main(String[] args) {
        System.exit(execute(args));
    }
}
