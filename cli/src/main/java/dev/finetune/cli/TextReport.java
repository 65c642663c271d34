package dev.finetune.cli;

import dev.finetune.cli.RecipeCheck.Located;
import dev.finetune.cli.RecipeCheck.Severity;
import dev.finetune.cli.RecipeCheck.Verdict;
import dev.finetune.recipes.UserError;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * For people: errors and warnings on stderr as {@code error: file:line:col: message (hint: ...)}, one verdict line
 * per recipe on stdout and a summary. A single recipe reads as it always did: its batch plan, no summary. Over
 * several recipes, a warning that several of them draw for the same reason is printed once at the end, with how many
 * recipes and where, instead of once per file.
 */
final class TextReport {
    /** Files named with a repeated warning before "and N more". */
    private static final int PLACES_SHOWN = 3;

    private TextReport() {}

    static void write(List<Verdict> verdicts, boolean single, PrintWriter out, PrintWriter err) {
        Map<String, List<Located>> repeated = single ? Map.of() : repeatedWarnings(verdicts);
        for (Verdict v : verdicts) {
            findings(v, err, repeated.keySet());
            if (v.fragment()) {
                out.println("fragment: " + v.recipe() + " (skipped: " + RecipeFiles.FRAGMENT_MARKER + ")");
            } else if (v.valid()) {
                if (single) {
                    out.println("valid: " + v.recipe());
                    out.print(v.validated().describe());
                    out.print(v.validated().leftToTheRun());
                } else {
                    // which trainer would run each one: a folder's verdicts differ by it (a refusal names it too)
                    out.println("valid: " + v.recipe() + " (" + v.validated().run().summary() + ")");
                }
            } else if (!single) {
                out.println("invalid: " + v.recipe() + " (" + v.errors() + " error" + (v.errors() == 1 ? "" : "s") + ")");
            }
            if (v.memory() != null) {
                out.println((single ? "" : "  ") + v.memory().describe());
            }
        }
        repeated.forEach((text, places) -> {
            List<String> where = places.stream().limit(PLACES_SHOWN).map(Located::where).toList();
            err.println("warning: " + places.size() + " recipes: " + text + "; in " + String.join(", ", where)
                    + (places.size() > PLACES_SHOWN ? " and " + (places.size() - PLACES_SHOWN) + " more" : ""));
        });
        err.flush();
        if (!single) {
            out.println(ReportFormat.Summary.of(verdicts).describe());
        }
    }

    /** Errors first, then warnings, on the error stream. */
    static void findings(Verdict v, PrintWriter err) {
        findings(v, err, Set.of());
    }

    /** As {@link #findings(Verdict, PrintWriter)}, leaving out the warnings printed once for all recipes. */
    private static void findings(Verdict v, PrintWriter err, Set<String> summarized) {
        for (Severity severity : Severity.values()) {
            for (Located f : v.findings()) {
                if (f.severity() == severity && !(severity == Severity.WARNING && summarized.contains(text(f)))) {
                    err.println((severity == Severity.ERROR ? "error: " : "warning: ") + f.oneLine());
                }
            }
        }
        err.flush();
    }

    /** Warnings whose text (without the place) two or more recipes draw, each with where it was drawn. */
    private static Map<String, List<Located>> repeatedWarnings(List<Verdict> verdicts) {
        Map<String, List<Located>> byText = new LinkedHashMap<>();
        for (Verdict v : verdicts) {
            for (Located f : v.findings()) {
                if (f.severity() == Severity.WARNING) {
                    List<Located> places = byText.computeIfAbsent(text(f), k -> new ArrayList<>());
                    if (places.stream().noneMatch(p -> p.recipe().equals(f.recipe()))) {
                        places.add(f);
                    }
                }
            }
        }
        byText.values().removeIf(places -> places.size() < 2);
        return byText;
    }

    /** A finding as printed, without its place: the same reason reads the same in every file. */
    private static String text(Located f) {
        return new UserError(null, f.message(), f.hint()).oneLine();
    }
}
