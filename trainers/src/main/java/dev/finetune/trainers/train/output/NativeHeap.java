package dev.finetune.trainers.train.output;

import com.sun.jna.Function;
import com.sun.jna.NativeLibrary;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Keeps the resident memory of a training run flat without handing the step's memory back every step.
 *
 * <p>glibc keeps the buffers libtorch frees and adapts its mmap threshold as sizes come and go, so the resident
 * set of a run settles on a plateau above what is live, and the plateau can creep up (the quickstart: anywhere
 * between 346 and 415 MB, moving by up to 19 % between steps 50 and 500). {@code malloc_trim(0)} brings it back to
 * what is live, but trimming after every step made the next step fault every page back in: on the bench's
 * {@code small} LoRA step about 120,000 page faults and a fifth of its CPU time (200 ms of 780 ms, 1 thread), on
 * the quickstart a third of its wall time. So the plateau is taken as the run's working set: the highest resident
 * set seen at the end of the first {@value #SETTLING_STEPS} steps, plus {@value #SLACK_PERCENT} %, and a step
 * that ends above it trims. A run whose allocations repeat (every training run) then trims a few times early and
 * rarely after.
 */
public final class NativeHeap {
    private static final Function MALLOC_TRIM = lookup();
    private static final Path STATUS = Path.of("/proc/self/status");
    static final int SETTLING_STEPS = 10;
    static final int SLACK_PERCENT = 10;

    private long steps;
    private long plateau;

    /** Called after each optimizer step: trims glibc's heap when the resident set is above the plateau. */
    public void afterStep() {
        if (MALLOC_TRIM != null && shouldTrim(residentBytes())) {
            MALLOC_TRIM.invokeInt(new Object[] {0});
        }
    }

    /**
     * Whether a step that ends with {@code resident} bytes resident (-1: unknown, which always trims) should trim,
     * learning the plateau over the first steps.
     */
    boolean shouldTrim(long resident) {
        if (resident < 0) {
            return true;
        }
        steps++;
        if (steps <= SETTLING_STEPS) {
            plateau = Math.max(plateau, resident);
            return false;
        }
        return resident > plateau + plateau / 100 * SLACK_PERCENT;
    }

    /** The resident set ({@code VmRSS}), or -1 where {@code /proc} is missing. */
    private static long residentBytes() {
        try {
            for (String line : Files.readAllLines(STATUS)) {
                if (line.startsWith("VmRSS:")) {
                    return Long.parseLong(line.substring("VmRSS:".length()).trim().split("\\s+")[0]) * 1024;
                }
            }
        } catch (IOException | RuntimeException e) {
            return -1;
        }
        return -1;
    }

    private static Function lookup() {
        try {
            return NativeLibrary.getInstance("c").getFunction("malloc_trim");
        } catch (UnsatisfiedLinkError e) {
            return null;
        }
    }
}
