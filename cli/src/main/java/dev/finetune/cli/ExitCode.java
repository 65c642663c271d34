package dev.finetune.cli;

/** The process's exit status, the same for every command ({@code finetune --help} lists them). */
final class ExitCode {
    static final int OK = 0;
    /** The run failed: our error, with a message and a stack trace. */
    static final int RUN_FAILED = 1;
    /** Bad input (recipe, data, flags): one line naming the file and line or key, and a hint. */
    static final int BAD_INPUT = 2;

    private ExitCode() {}
}
