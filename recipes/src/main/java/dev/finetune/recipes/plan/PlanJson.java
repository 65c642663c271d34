package dev.finetune.recipes.plan;

import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import java.util.Locale;

/** The plan as one JSON object for scripts: every number in bytes. */
public final class PlanJson {

    private PlanJson() {}

    public static String render(MemoryPlan plan) {
        return new GsonBuilder().setPrettyPrinting().disableHtmlEscaping().create().toJson(toJson(plan));
    }

    public static JsonObject toJson(MemoryPlan plan) {
        MemoryEstimate e = plan.estimate();
        JsonObject o = summary(e);
        o.addProperty("model", e.setup().modelName());
        o.addProperty("parameters", e.setup().model().parameterCount());
        o.addProperty("trainable_parameters", e.setup().model().parameters().trainable(e.setup().adapter()));
        o.addProperty("precision", key(e.setup().precision().name()));
        o.addProperty("optimizer", key(e.setup().optimizer().name()));
        o.addProperty("sharding", key(e.setup().sharding().name()));
        o.addProperty("objective", e.setup().objective().label());
        o.addProperty("gradient_checkpointing", e.setup().gradientCheckpointing());
        o.addProperty("hardware", e.setup().hardware().label());
        JsonObject batch = new JsonObject();
        batch.addProperty("micro", e.setup().microBatch());
        batch.addProperty("ranks", e.setup().ranks());
        batch.addProperty("accumulation", e.setup().gradientAccumulation());
        batch.addProperty("global", e.setup().globalBatch());
        batch.addProperty("tokens_per_micro_step", (long) e.setup().sequencesPerMicroBatch() * e.setup().trainedSequenceLength());
        o.add("batch", batch);
        JsonObject phases = new JsonObject();
        for (Phase ph : e.phases()) {
            JsonObject phase = new JsonObject();
            phase.addProperty("total_bytes", e.total(ph));
            JsonObject terms = new JsonObject();
            for (Term t : e.terms()) {
                if (t.bytes().containsKey(ph)) {
                    terms.addProperty(t.name(), t.in(ph));
                }
            }
            phase.add("terms", terms);
            phases.add(key(ph.name()), phase);
        }
        o.add("phases", phases);
        JsonArray remedies = new JsonArray();
        for (Remedy r : plan.remedies()) {
            JsonObject rj = summary(r.result());
            rj.addProperty("change", r.change());
            rj.addProperty("cost", r.cost());
            remedies.add(rj);
        }
        o.add("remedies", remedies);
        return o;
    }

    /** peak, phase, capacity, verdict and the terms at the peak phase. */
    private static JsonObject summary(MemoryEstimate e) {
        JsonObject o = new JsonObject();
        o.addProperty("peak_bytes", e.peakBytes());
        o.addProperty("peak_phase", key(e.peakPhase().name()));
        o.addProperty("capacity_bytes", e.capacityBytes());
        o.addProperty("fits", e.fits());
        o.addProperty("headroom_bytes", e.headroomBytes());
        JsonObject terms = new JsonObject();
        for (Term t : e.terms()) {
            terms.addProperty(t.name(), t.in(e.peakPhase()));
        }
        o.add("terms", terms);
        return o;
    }

    private static String key(String enumName) {
        return enumName.toLowerCase(Locale.ROOT);
    }
}
