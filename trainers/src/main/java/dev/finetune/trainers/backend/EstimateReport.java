package dev.finetune.trainers.backend;

import dev.finetune.recipes.plan.MemoryEstimate;
import dev.finetune.recipes.plan.Phase;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.recipes.plan.TimeModel;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The plan next to what the run measures: after the first optimizer step the planned and the measured peak memory
 * (resident set, {@code VmHWM}, on CPU) and, from the worker, its tensors' bytes per plan term; after the first few
 * steps the measured tokens/s with the ETA it gives.
 * The first step's numbers also go to {@code metrics.jsonl}, so a plan that is off can be found later.
 */
public final class EstimateReport {
    /** Steps averaged for the speed line; the first is left out when there are more (it warms caches and threads). */
    static final int SPEED_STEPS = 5;
    /** Tensor bytes are exact: a plan term further than this from what the rank's tensors hold is wrong. */
    public static final double TENSOR_TOLERANCE = 0.01;
    private static final double MIB = 1024.0 * 1024.0;

    private final RunPlan plan;
    private final PrintWriter out;
    private final long totalSteps;
    private long firstStep = -1;
    private double tokensPerSecondSum;
    private int timed;

    /** @param plan {@code null} when there is none (the report then says nothing) */
    public EstimateReport(RunPlan plan, PrintWriter out, long totalSteps) {
        this.plan = plan;
        this.out = out;
        this.totalSteps = totalSteps;
    }

    /** The first step's line for metrics.jsonl (plan and measured peak), printed too. */
    public Map<String, Object> firstStep(Map<String, Object> line) {
        return firstStep(line, "", "resident set, VmHWM");
    }

    /**
     * The same for one of several ranks, each of which the plan's per-device estimate describes.
     *
     * @param who printed before the line, e.g. {@code "[rank 1 host] "}
     * @param measuredAs what the measured number is ({@code resident set, VmHWM} or {@code max_memory_reserved})
     */
    public Map<String, Object> firstStep(Map<String, Object> line, String who, String measuredAs) {
        if (plan == null || !(line.get("peak_memory_mb") instanceof Number measured) || Double.isNaN(measured.doubleValue())) {
            return Map.of();
        }
        double planned = plan.memory().estimate().peakBytes() / MIB;
        double diff = 100 * (planned / measured.doubleValue() - 1);
        out.printf(Locale.ROOT, "%smemory after step %s: plan %.0f MiB, measured peak %.0f MiB (%s): the plan is "
                + "%.1f %% %s%n", who, line.get("step"), planned, measured.doubleValue(), measuredAs, Math.abs(diff),
                diff >= 0 ? "above it" : "below it");
        out.flush();
        Map<String, Object> report = new LinkedHashMap<>();
        report.put("plan_peak_memory_mb", planned);
        report.put("peak_memory_mb", measured.doubleValue());
        report.put("plan_peak_memory_error_pct", diff);
        return report;
    }

    /**
     * A rank's own tensor bytes per plan term after the first optimizer step ({@link MemoryEstimate#tensorTerms}'s
     * names) and its load peak, beside the plan's: the fields {@code memory/<term>_mb} and {@code plan_memory/<term>_mb}
     * for the step's metrics line, and one printed line naming any term off by more than {@link #TENSOR_TOLERANCE}.
     *
     * @param measured bytes per term, only the terms the run has
     * @param loadPeakMb the peak while the model was loaded, or NaN when unknown
     */
    public Map<String, Object> tensors(long step, Map<String, Long> measured, double loadPeakMb, String who) {
        Map<String, Long> planned = plan == null ? Map.of() : plan.memory().estimate().tensorTerms();
        Map<String, Object> fields = new LinkedHashMap<>();
        List<String> shown = new ArrayList<>();
        List<String> off = new ArrayList<>();
        measured.forEach((term, bytes) -> {
            fields.put("memory/" + term + "_mb", bytes / MIB);
            Long plannedBytes = planned.get(term);
            if (plannedBytes == null) {
                shown.add(term + " " + mib(bytes / MIB) + " MiB");
                return;
            }
            fields.put("plan_memory/" + term + "_mb", plannedBytes / MIB);
            shown.add(term + " " + mib(bytes / MIB) + " MiB (plan " + mib(plannedBytes / MIB) + ")");
            double error = plannedBytes == 0 ? (bytes == 0 ? 0 : 1) : (double) bytes / plannedBytes - 1;
            if (Math.abs(error) > TENSOR_TOLERANCE) {
                off.add(String.format(Locale.ROOT, "%s off by %+.1f %%", term, 100 * error));
            }
        });
        planned.keySet().stream().filter(term -> !measured.containsKey(term)).forEach(term -> off.add(term
                + " not measured"));
        String load = "";
        if (!Double.isNaN(loadPeakMb)) {
            fields.put("memory/load_peak_mb", loadPeakMb);
            MemoryEstimate estimate = plan == null ? null : plan.memory().estimate();
            load = "; load peak " + mib(loadPeakMb) + " MiB";
            if (estimate != null && estimate.phases().contains(Phase.LOAD)) {
                double plannedLoad = estimate.total(Phase.LOAD) / MIB;
                fields.put("plan_memory/load_peak_mb", plannedLoad);
                load += " (plan " + mib(plannedLoad) + ")";
            }
        }
        String verdict = planned.isEmpty() ? "" : off.isEmpty()
                ? String.format(Locale.ROOT, ": all within %.0f %%", 100 * TENSOR_TOLERANCE) : ": " + String.join(", ", off);
        out.printf(Locale.ROOT, "%stensors after step %s: %s%s%s%n", who, step, String.join(", ", shown), verdict, load);
        out.flush();
        return fields;
    }

    private static String mib(double mb) {
        return String.format(Locale.ROOT, mb >= 10 ? "%.1f" : "%.3f", mb);
    }

    /** After every step: once enough steps ran, the measured speed and the ETA next to the plan's. */
    public void afterStep(long step, Map<String, Object> line) {
        if (plan == null || plan.time() == null || !(line.get("tokens_per_second") instanceof Number rate) || step == 0) {
            return;
        }
        if (firstStep < 0) {
            firstStep = step;
        }
        long ran = step - firstStep + 1;
        long wanted = Math.min(SPEED_STEPS, totalSteps - firstStep + 1);
        if (ran > 1 || wanted == 1) {
            tokensPerSecondSum += rate.doubleValue();
            timed++;
        }
        if (ran != wanted || timed == 0) {
            return;
        }
        TimeModel.Estimate t = plan.time();
        double measured = tokensPerSecondSum / timed;
        double planned = t.tokensPerSecondPerDevice();
        double left = (totalSteps - step) * (t.tokensPerStep() / (double) t.devices()) / measured;
        out.printf(Locale.ROOT, "speed after %d steps: %,.0f tokens/s measured, plan %,.0f (%+.0f %%); ETA %s for the %d steps left"
                + " (plan: %s for the run)%n", ran, measured, planned, 100 * (planned / measured - 1), TimeModel.duration(left),
                totalSteps - step, t.totalSeconds() == null ? "unknown" : TimeModel.duration(t.totalSeconds()));
        out.flush();
    }
}
