package dev.finetune.cli;

import java.io.PrintWriter;
import java.io.StringWriter;

/** The command line run in this JVM, its output captured: for checks that run it hundreds of times. */
final class InProcess {
    record Run(int exit, String out, String err) {}

    private InProcess() {}

    static Run finetune(String... args) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        int exit = Main.execute(new PrintWriter(out), new PrintWriter(err), args);
        return new Run(exit, out.toString(), err.toString());
    }
}
