package dev.finetune.cli;

import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.model.ModelParameters;
import dev.finetune.recipes.plan.MemoryEstimate;
import dev.finetune.recipes.plan.Term;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/** {@code finetune diff A B [KEY=VALUE…]}: what changes in meaning between two recipes, not in text. */
@Command(name = "diff", mixinStandardHelpOptions = true,
        description = {"Compare two resolved recipes key by key (base: merged, overrides applied, defaults shown), "
                + "then their batch plans and memory plans.",
            "Overrides apply to B, so 'diff r.yaml r.yaml lora_r=32' shows what that override would change. "
                    + "Exit 0, or 2 when either recipe is invalid."})
final class DiffCommand implements Callable<Integer> {
    private static final double GIB = 1024.0 * 1024.0 * 1024.0;

    @Spec
    CommandSpec spec;

    @Parameters(index = "0", paramLabel = "A", description = "the recipe before")
    Path a;

    @Parameters(index = "1", paramLabel = "B", description = "the recipe after")
    Path b;

    @Parameters(index = "2..*", arity = "0..*", paramLabel = "KEY=VALUE", description = "overrides applied to B")
    List<String> overrides = new ArrayList<>();

    @Override
    public Integer call() {
        PrintWriter out = spec.commandLine().getOut();
        PrintWriter err = spec.commandLine().getErr();
        ValidatedRecipe before = ValidatedRecipe.load(a, List.of());
        ValidatedRecipe after = ValidatedRecipe.load(b, overrides);
        ValidateCommand.printWarnings(err, before.warnings());
        ValidateCommand.printWarnings(err, after.warnings());
        // Local paths are written relative to the folder both recipes are in, so the same file reads the same.
        Path here = commonFolder(a.toAbsolutePath().normalize().getParent(), b.toAbsolutePath().normalize().getParent());
        out.println("--- " + a);
        out.println("+++ " + b + (overrides.isEmpty() ? "" : " " + String.join(" ", overrides)));
        List<RecipeDiff.Change> changes = RecipeDiff.changes(RecipeDiff.resolved(before, here), RecipeDiff.resolved(after, here));
        out.println(changes.isEmpty() ? "recipe: the same after resolving"
                : "recipe: " + changes.size() + " key" + (changes.size() == 1 ? "" : "s") + " differ");
        changes.forEach(c -> out.println("  " + c.describe()));
        section(out, "batch plan", lines(before.describe()), lines(after.describe()));
        section(out, "memory plan", memory(before, a), memory(after, b));
        return ExitCode.OK;
    }

    private static Path commonFolder(Path x, Path y) {
        Path common = x;
        while (common != null && !y.startsWith(common)) {
            common = common.getParent();
        }
        return common != null ? common : x.getRoot();
    }

    /** Changed lines of two labelled listings ({@code label: value}), or that there are none. */
    private static void section(PrintWriter out, String title, Map<String, String> x, Map<String, String> y) {
        List<String> changed = new ArrayList<>();
        for (String label : union(x, y)) {
            String before = x.getOrDefault(label, "-");
            String after = y.getOrDefault(label, "-");
            if (!before.equals(after)) {
                changed.add("  " + label + ": " + before + " -> " + after);
            }
        }
        out.println(title + (changed.isEmpty() ? ": the same" : ":"));
        changed.forEach(out::println);
    }

    private static List<String> union(Map<String, String> x, Map<String, String> y) {
        List<String> labels = new ArrayList<>(x.keySet());
        y.keySet().stream().filter(k -> !x.containsKey(k)).forEach(labels::add);
        return labels;
    }

    private static Map<String, String> lines(String listing) {
        Map<String, String> out = new LinkedHashMap<>();
        for (String line : listing.split("\n")) {
            int colon = line.indexOf(": ");
            if (colon > 0) {
                out.put(line.substring(0, colon), line.substring(colon + 2));
            }
        }
        return out;
    }

    /** The memory plan on the hardware the recipe declares (this machine when it declares none). */
    private static Map<String, String> memory(ValidatedRecipe recipe, Path file) {
        Map<String, String> out = new LinkedHashMap<>();
        try {
            MemoryEstimate e = PlanCommand.memoryPlan(recipe, file, null, null)
                    .estimate();
            out.put("hardware", e.setup().hardware().label());
            // exact figures, so that a change too small for the GiB total (lora_r 8 -> 16 on a tiny model) still shows
            long trainable = ModelParameters.of(e.setup().model()).trainable(e.setup().adapter());
            out.put("trainable parameters", String.format(Locale.ROOT, "%,d", trainable));
            out.put("peak per device", String.format(Locale.ROOT, "%.2f GiB (%,d B)", e.peakBytes() / GIB, e.peakBytes()));
            out.put("peak phase", e.peakPhase().label());
            for (Term term : e.terms()) {
                out.put(term.name(), String.format(Locale.ROOT, "%,d B", term.max()));
            }
            out.put("fits", e.fits() ? "yes" : String.format(Locale.ROOT, "no (%.1f GiB over)", -e.headroomBytes() / GIB));
        } catch (UserError e) {
            out.put("not available", e.oneLine());
        }
        return out;
    }
}
