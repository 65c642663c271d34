package dev.finetune.trainers.train.output;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** The process's peak resident memory ({@code VmHWM}): native tensors, JVM heap and libraries together. */
public final class PeakMemory {
    private static final Path STATUS = Path.of("/proc/self/status");

    private PeakMemory() {}

    /** Peak resident set in MiB, or NaN where {@code /proc} is missing (not Linux). */
    public static double megabytes() {
        try {
            for (String line : Files.readAllLines(STATUS)) {
                if (line.startsWith("VmHWM:")) {
                    String kilobytes = line.substring("VmHWM:".length()).trim().split("\\s+")[0];
                    return Long.parseLong(kilobytes) / 1024.0;
                }
            }
        } catch (IOException | RuntimeException e) {
            return Double.NaN;
        }
        return Double.NaN;
    }
}
