package dev.finetune.trainers.bench;

import java.io.IOException;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;

/**
 * This process's CPU time, the machine's busy and steal time from {@code /proc/stat}, and the wall clock: what a
 * benchmark line needs to show whether other processes disturbed it.
 */
record CpuCounters(long processNanos, long machineBusyTicks, long wallNanos) {
    private static final long TICKS_PER_SECOND = 100; // USER_HZ, fixed at 100 on Linux

    static CpuCounters now() {
        var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        return new CpuCounters(os.getProcessCpuTime(), readMachineBusyTicks(), System.nanoTime());
    }

    /** user + nice + system + irq + softirq + steal of all cores; -1 where /proc is missing. */
    private static long readMachineBusyTicks() {
        try {
            String[] f = Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
            long busy = 0;
            for (int i : new int[] {1, 2, 3, 6, 7, 8}) {
                busy += i < f.length ? Long.parseLong(f[i]) : 0;
            }
            return busy;
        } catch (IOException | RuntimeException e) {
            return -1;
        }
    }

    double cpuPerWallUntil(CpuCounters later) {
        return (later.processNanos - processNanos) / (double) (later.wallNanos - wallNanos);
    }

    /** Share of the machine's capacity used by other processes (and stolen) between two readings. */
    static double otherShare(CpuCounters a, CpuCounters b) {
        if (a.machineBusyTicks < 0 || b.machineBusyTicks < 0) {
            return Double.NaN;
        }
        double wallSeconds = (b.wallNanos - a.wallNanos) / 1e9;
        double capacityTicks = wallSeconds * TICKS_PER_SECOND * Runtime.getRuntime().availableProcessors();
        double ownTicks = (b.processNanos - a.processNanos) / 1e9 * TICKS_PER_SECOND;
        return Math.max(0, (b.machineBusyTicks - a.machineBusyTicks) - ownTicks) / capacityTicks;
    }

    /** Polls in 2-second windows until other processes use under 10% of the machine, or gives up after {@code seconds}. */
    static void waitUntilQuiet(double seconds, PrintWriter out) {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        while (true) {
            CpuCounters before = now();
            try {
                Thread.sleep(2000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
            double others = otherShare(before, now());
            if (!(others >= 0.10)) {
                return;
            }
            if (System.nanoTime() > deadline) {
                out.printf(Locale.ROOT, "wait_quiet: gave up after %.0f s (others %.0f%%)%n", seconds, others * 100);
                out.flush();
                return;
            }
        }
    }
}
