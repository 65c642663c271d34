package dev.finetune.recipes.plan;

import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import java.util.Locale;

/** The plan as one JSON object for scripts: every number in bytes. */
public final class PlanJson {

    private PlanJson() {}

    public static String render(MemoryPlan plan) {
        return new GsonBuilder().setPrettyPrinting().disableHtmlEscaping().create().toJson(toJson(plan));
    }

    /** Memory and, under {@code "time"}, the same time and cost numbers the text plan prints. */
    public static String render(RunPlan run) {
        JsonObject o = toJson(run.memory());
        if (run.time() != null) {
            o.add("time", time(run.time()));
        } else {
            o.add("time", JsonNull.INSTANCE);
            o.addProperty("time_note", run.noTime());
        }
        return new GsonBuilder().setPrettyPrinting().disableHtmlEscaping().serializeNulls().create().toJson(o);
    }

    /** Absent totals (steps unknown before the data is read, no price) are {@code null}, never 0. */
    static JsonObject time(TimeModel.Estimate t) {
        JsonObject o = new JsonObject();
        o.addProperty("flops_per_token", t.flops().perToken());
        o.addProperty("flops_formula", t.flops().formula());
        o.addProperty("device", t.device().label());
        o.addProperty("peak_flops", t.device().peakFlops());
        o.addProperty("utilization", t.device().utilization());
        o.addProperty("effective_flops", t.device().effectiveFlops());
        o.addProperty("bandwidth_bytes_per_second", t.device().bandwidth());
        o.addProperty("seconds_per_call", t.device().secondsPerCall());
        if (t.overhead() != null) {
            o.addProperty("calls_per_step", t.overhead().calls());
            o.addProperty("memory_bound_bytes_per_step", t.overhead().bytes());
            o.addProperty("overhead_seconds_per_step", t.overheadSecondsPerStep());
        }
        o.addProperty("devices", t.devices());
        o.addProperty("tokens_per_second_per_device", t.tokensPerSecondPerDevice());
        o.addProperty("tokens_per_step", t.tokensPerStep());
        o.addProperty("seconds_per_step", t.secondsPerStep());
        o.addProperty("generation_seconds_per_step", t.generationSecondsPerStep());
        o.addProperty("total_steps", t.totalSteps());
        o.addProperty("total_tokens", t.totalTokens());
        o.addProperty("wall_seconds", t.totalSeconds());
        o.addProperty("cost_per_gpu_hour", t.costPerGpuHour());
        o.addProperty("cost", t.cost());
        return o;
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
        o.addProperty("objective", e.setup().objectiveLabel());
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
