package dev.finetune.cli;

import dev.finetune.cli.RecipeCheck.Located;
import dev.finetune.cli.RecipeCheck.Severity;
import dev.finetune.cli.RecipeCheck.Verdict;
import java.io.PrintWriter;
import java.util.List;

/**
 * For GitHub Actions: workflow commands ({@code ::error file=…,line=…,col=…,title=…::message}) that GitHub shows as
 * annotations on the pull request's lines, then the summary. Paths are printed as given, so run it from the
 * repository root with relative paths for the annotations to land on the files.
 */
final class GithubReport {
    private GithubReport() {}

    static void write(List<Verdict> verdicts, PrintWriter out) {
        for (Verdict v : verdicts) {
            for (Located f : v.findings()) {
                out.println(command(f));
            }
        }
        out.println(ReportFormat.Summary.of(verdicts).describe());
    }

    static String command(Located f) {
        StringBuilder line = new StringBuilder("::").append(f.severity() == Severity.ERROR ? "error" : "warning");
        line.append(" file=").append(property(f.file()));
        if (f.line() != null) {
            line.append(",line=").append(f.line()).append(",col=").append(f.column());
        }
        line.append(",title=").append(property("finetune validate" + (f.key() == null ? "" : ": " + f.key())));
        String text = f.message() + (f.hint() == null || f.hint().isEmpty() ? "" : " (hint: " + f.hint() + ")");
        return line.append("::").append(data(text)).toString();
    }

    /** The escaping GitHub's toolkit applies to a command's message. */
    static String data(String s) {
        return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A");
    }

    /** The escaping GitHub's toolkit applies to a property value: the message's, plus ':' and ','. */
    static String property(String s) {
        return data(s).replace(":", "%3A").replace(",", "%2C");
    }
}
