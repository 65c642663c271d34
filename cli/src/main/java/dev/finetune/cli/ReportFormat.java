package dev.finetune.cli;

import dev.finetune.cli.RecipeCheck.Verdict;
import dev.finetune.recipes.UserError;
import java.io.PrintWriter;
import java.util.List;
import java.util.Locale;

/** How {@code validate} reports: for people, or for the CI system that runs it. */
enum ReportFormat {
    TEXT, JSON, JUNIT, GITHUB;

    static ReportFormat parse(String name) {
        for (ReportFormat f : values()) {
            if (f.name().equalsIgnoreCase(name)) {
                return f;
            }
        }
        throw new UserError("--format", "unknown format '" + name + "'", "use text, json, junit or github");
    }

    /**
     * @param single one recipe file was named: the text report then also prints its batch plan, and no summary
     */
    void write(List<Verdict> verdicts, boolean single, PrintWriter out, PrintWriter err) {
        switch (this) {
            case TEXT -> TextReport.write(verdicts, single, out, err);
            case JSON -> JsonReport.write(verdicts, out);
            case JUNIT -> JunitReport.write(verdicts, out);
            case GITHUB -> GithubReport.write(verdicts, out);
        }
        out.flush();
        err.flush();
    }

    /** Files, valid, invalid, warnings and skipped fragments over all verdicts. */
    record Summary(int files, int valid, int invalid, long warnings, int fragments) {
        static Summary of(List<Verdict> verdicts) {
            int fragments = (int) verdicts.stream().filter(Verdict::fragment).count();
            int valid = (int) verdicts.stream().filter(Verdict::valid).count();
            long warnings = verdicts.stream().mapToLong(Verdict::warnings).sum();
            return new Summary(verdicts.size() - fragments, valid, verdicts.size() - fragments - valid, warnings, fragments);
        }

        String describe() {
            return String.format(Locale.ROOT, "%d recipe%s: %d valid, %d invalid, %d warning%s%s", files,
                    files == 1 ? "" : "s", valid, invalid, warnings, warnings == 1 ? "" : "s",
                    fragments == 0 ? "" : ", " + fragments + " fragment" + (fragments == 1 ? "" : "s") + " skipped");
        }
    }
}
