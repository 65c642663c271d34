package dev.finetune.trainers.backend;

import dev.finetune.trainers.model.TorchScript;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Where the time from launch to the end of the first training step went, for the one line printed after that
 * step: what a user waits for before training starts is mostly not training.
 *
 * <p>The launch is the process's start, which is the launcher script's (it {@code exec}s the JVM in the same
 * process); the JVM's own start is its runtime bean's. Phases are closed by {@link #lap} in the order they run.
 */
final class StartupClock {
    private final long launched;
    private final List<String> phases = new ArrayList<>();
    private final List<Long> ends = new ArrayList<>();
    private final double compiledBefore;
    private long last;

    private StartupClock(long launched, long jvmStarted) {
        this.launched = launched;
        this.last = launched;
        this.compiledBefore = TorchScript.compileSeconds();
        if (jvmStarted > launched) {
            lapAt("launcher", jvmStarted);
        }
    }

    /** A clock whose first phases (launcher, then the JVM's start up to now: recipe checks and plan) are done. */
    static StartupClock sinceLaunch() {
        long jvmStarted = ManagementFactory.getRuntimeMXBean().getStartTime();
        long launched = ProcessHandle.current().info().startInstant().map(i -> i.toEpochMilli()).orElse(jvmStarted);
        StartupClock clock = new StartupClock(Math.min(launched, jvmStarted), jvmStarted);
        clock.lap("JVM start, recipe checks and plan");
        return clock;
    }

    /** Ends the phase {@code name} now. */
    void lap(String name) {
        lapAt(name, System.currentTimeMillis());
    }

    private void lapAt(String name, long at) {
        phases.add(name);
        ends.add(at);
        last = at;
    }

    /**
     * {@code startup: first step done 9.8 s after launch: launcher 0.6 s, ...}, the layer modules' compile time
     * (which falls in whichever phase first ran the model) given on its own.
     */
    String line() {
        // on shared cores the wall clock says more about the neighbours than about us: the CPU time says what we spent
        String cpu = ProcessHandle.current().info().totalCpuDuration()
                .map(d -> String.format(Locale.ROOT, " (%.1f s of CPU)", d.toMillis() / 1000.0)).orElse("");
        StringBuilder s = new StringBuilder(String.format(Locale.ROOT, "startup: first step done %.1f s after launch%s:",
                (last - launched) / 1000.0, cpu));
        long from = launched;
        for (int i = 0; i < phases.size(); i++) {
            s.append(String.format(Locale.ROOT, "%s %s %.1f s", i == 0 ? "" : ",", phases.get(i),
                    (ends.get(i) - from) / 1000.0));
            from = ends.get(i);
        }
        s.append(String.format(Locale.ROOT, "; of all that, compiling the layer modules %.2f s",
                TorchScript.compileSeconds() - compiledBefore));
        return s.toString();
    }
}
