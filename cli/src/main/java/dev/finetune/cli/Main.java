package dev.finetune.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** Entry point; the only place that calls {@link System#exit}. Exit codes: 0 ok, 1 run failed, 2 bad input. */
@Command(
        name = "finetune",
        mixinStandardHelpOptions = true,
        version = "finetune 0.1.0",
        description = "Fine-tune large language models from one YAML recipe.",
        subcommands = {})
public final class Main implements Runnable {

    public static final int OK = 0;
    public static final int RUN_FAILED = 1;
    public static final int BAD_INPUT = 2;

    @Override
    public void run() {
        CommandLine.usage(this, System.out);
    }

    public static int execute(String... args) {
        return new CommandLine(new Main()).execute(args);
    }

    public static void main(String[] args) {
        System.exit(execute(args));
    }
}
