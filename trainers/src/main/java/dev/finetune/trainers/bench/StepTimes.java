package dev.finetune.trainers.bench;

import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.trainers.train.Trainer;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Takes each step's time from the trainer's own measurement (its tokens/s over the step's tokens), so it covers
 * exactly the optimizer step; CPU and machine counters start after the last warm-up step.
 */
final class StepTimes implements Trainer.Listener {
    private final int warmup;
    private final int timedSteps;
    private final long tokensPerStep;
    private final Path profile;
    private final PrintWriter out;
    private final List<Double> timed = new ArrayList<>();
    private double firstLoss = Double.NaN;
    private double lastLoss = Double.NaN;
    private double peakMegabytes = Double.NaN;
    private CpuCounters start;
    private CpuCounters end;

    StepTimes(int warmup, int timedSteps, long tokensPerStep, Path profile, PrintWriter out) {
        this.warmup = warmup;
        this.timedSteps = timedSteps;
        this.tokensPerStep = tokensPerStep;
        this.profile = profile;
        this.out = out;
        if (warmup == 0) {
            start = CpuCounters.now();
        }
    }

    @Override
    public void afterStep(long step, Map<String, Object> metrics) {
        double seconds = tokensPerStep / (double) metrics.get("tokens_per_second");
        double loss = (double) metrics.get("loss");
        if (step > warmup + timedSteps) {
            JniUtils.stopProfile(profile.toString());
            out.printf(Locale.ROOT, "profiled step %d ms=%.1f trace=%s%n", step - 1, seconds * 1e3, profile);
            out.flush();
            return;
        }
        boolean isTimed = step > warmup;
        if (step == 1) {
            firstLoss = loss;
        }
        lastLoss = loss;
        if (isTimed) {
            timed.add(seconds);
            end = CpuCounters.now();
            peakMegabytes = (double) metrics.get("peak_memory_mb");
        }
        out.printf(Locale.ROOT, "step %d %s ms=%.1f loss=%.4f%n", step - 1, isTimed ? "timed" : "warmup",
                seconds * 1e3, loss);
        out.flush();
        if (step == warmup) {
            start = CpuCounters.now();
        }
        if (profile != null && step == warmup + timedSteps) {
            JniUtils.startProfile(false, true, true);
        }
    }

    double[] timedSeconds() {
        return timed.stream().mapToDouble(Double::doubleValue).toArray();
    }

    double firstLoss() {
        return firstLoss;
    }

    double lastLoss() {
        return lastLoss;
    }

    double peakMegabytes() {
        return peakMegabytes;
    }

    double cpuPerWall() {
        return start.cpuPerWallUntil(end);
    }

    double otherCpu() {
        return CpuCounters.otherShare(start, end);
    }

    /** This process's CPU time per timed step: less disturbed by other processes than wall time. */
    double cpuMillisPerStep() {
        return (end.processNanos() - start.processNanos()) / 1e6 / timed.size();
    }
}
