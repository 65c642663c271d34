package dev.finetune.cli;

import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import dev.finetune.cli.RecipeCheck.Located;
import dev.finetune.cli.RecipeCheck.Verdict;
import java.io.PrintWriter;
import java.util.List;
import java.util.Locale;

/**
 * For programs: one JSON document, whose schema is {@code validate-report.schema.json} beside this class (the
 * README shows an example). {@code findings} holds one object per error or warning; {@code recipes} one verdict per
 * file, so a valid recipe without findings is still listed.
 */
final class JsonReport {
    /** Bumped whenever a field changes meaning or goes away; new fields do not bump it. */
    static final String SCHEMA = "finetune-validate-report/1";

    private JsonReport() {}

    static void write(List<Verdict> verdicts, PrintWriter out) {
        JsonObject report = new JsonObject();
        report.addProperty("schema", SCHEMA);
        JsonArray recipes = new JsonArray();
        JsonArray findings = new JsonArray();
        for (Verdict v : verdicts) {
            JsonObject recipe = new JsonObject();
            recipe.addProperty("file", v.recipe().toString());
            recipe.addProperty("verdict", v.fragment() ? "fragment" : v.valid() ? "valid" : "invalid");
            recipe.addProperty("errors", v.errors());
            recipe.addProperty("warnings", v.warnings());
            if (v.memory() != null) {
                JsonObject memory = new JsonObject();
                memory.addProperty("fits", v.memory().fits());
                memory.addProperty("peak_bytes", v.memory().peakBytes());
                memory.addProperty("capacity_bytes", v.memory().capacityBytes());
                memory.addProperty("peak_phase", v.memory().peakPhase());
                memory.addProperty("hardware", v.memory().hardware());
                recipe.add("memory", memory);
            }
            recipes.add(recipe);
            for (Located f : v.findings()) {
                findings.add(finding(f));
            }
        }
        report.add("recipes", recipes);
        report.add("findings", findings);
        ReportFormat.Summary s = ReportFormat.Summary.of(verdicts);
        JsonObject summary = new JsonObject();
        summary.addProperty("files", s.files());
        summary.addProperty("valid", s.valid());
        summary.addProperty("invalid", s.invalid());
        summary.addProperty("warnings", s.warnings());
        summary.addProperty("fragments", s.fragments());
        report.add("summary", summary);
        out.println(new GsonBuilder().setPrettyPrinting().serializeNulls().disableHtmlEscaping().create().toJson(report));
    }

    private static JsonObject finding(Located f) {
        JsonObject o = new JsonObject();
        o.addProperty("recipe", f.recipe().toString());
        o.addProperty("file", f.file());
        o.add("line", f.line() == null ? JsonNull.INSTANCE : new JsonPrimitive(f.line()));
        o.add("column", f.column() == null ? JsonNull.INSTANCE : new JsonPrimitive(f.column()));
        o.add("key", f.key() == null ? JsonNull.INSTANCE : new JsonPrimitive(f.key()));
        o.addProperty("severity", f.severity().name().toLowerCase(Locale.ROOT));
        o.addProperty("message", f.message());
        o.add("hint", f.hint() == null || f.hint().isEmpty() ? JsonNull.INSTANCE : new JsonPrimitive(f.hint()));
        return o;
    }
}
