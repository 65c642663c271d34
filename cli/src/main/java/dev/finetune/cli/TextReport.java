package dev.finetune.cli;

import dev.finetune.cli.RecipeCheck.Located;
import dev.finetune.cli.RecipeCheck.Severity;
import dev.finetune.cli.RecipeCheck.Verdict;
import java.io.PrintWriter;
import java.util.List;

/**
 * For people: errors and warnings on stderr as {@code error: file:line:col: message (hint: ...)}, one verdict line
 * per recipe on stdout and a summary. A single recipe reads as it always did: its batch plan, no summary.
 */
final class TextReport {
    private TextReport() {}

    static void write(List<Verdict> verdicts, boolean single, PrintWriter out, PrintWriter err) {
        for (Verdict v : verdicts) {
            findings(v, err);
            if (v.fragment()) {
                out.println("fragment: " + v.recipe() + " (skipped: " + RecipeFiles.FRAGMENT_MARKER + ")");
            } else if (v.valid()) {
                out.println("valid: " + v.recipe());
                if (single) {
                    out.print(v.validated().describe());
                }
            } else if (!single) {
                out.println("invalid: " + v.recipe() + " (" + v.errors() + " error" + (v.errors() == 1 ? "" : "s") + ")");
            }
            if (v.memory() != null) {
                out.println((single ? "" : "  ") + v.memory().describe());
            }
        }
        if (!single) {
            out.println(ReportFormat.Summary.of(verdicts).describe());
        }
    }

    /** Errors first, then warnings, on the error stream. */
    static void findings(Verdict v, PrintWriter err) {
        for (Severity severity : Severity.values()) {
            for (Located f : v.findings()) {
                if (f.severity() == severity) {
                    err.println((severity == Severity.ERROR ? "error: " : "warning: ") + f.oneLine());
                }
            }
        }
        err.flush();
    }
}
