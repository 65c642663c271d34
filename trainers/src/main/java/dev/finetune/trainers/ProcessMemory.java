package dev.finetune.trainers;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * This process's resident memory as Linux reports it: the Java heap, libtorch's allocations and mapped weights
 * together, which no Java API sees. Zero where {@code /proc} is unavailable.
 */
public final class ProcessMemory {
    private ProcessMemory() {}

    /** Peak resident set size ({@code VmHWM}) in bytes. */
    public static long peakResidentBytes() {
        return statusField("VmHWM:");
    }

    /** Current resident set size ({@code VmRSS}) in bytes. */
    public static long residentBytes() {
        return statusField("VmRSS:");
    }

    private static long statusField(String field) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith(field)) {
                    String[] parts = line.substring(field.length()).trim().split("\\s+");
                    return Long.parseLong(parts[0]) * 1024;
                }
            }
        } catch (IOException | RuntimeException e) {
            return 0;
        }
        return 0;
    }
}
