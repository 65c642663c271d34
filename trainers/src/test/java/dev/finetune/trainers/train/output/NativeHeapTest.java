package dev.finetune.trainers.train.output;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The heap is trimmed only when a step ends above the plateau the first steps set, never while it is learned. */
class NativeHeapTest {
    private static final long MB = 1 << 20;

    @Test
    void trimsOnlyAboveThePlateauOfTheFirstSteps() {
        NativeHeap heap = new NativeHeap();
        List<Boolean> trimmed = new ArrayList<>();
        long[] settling = {300, 340, 360, 350, 355, 360, 358, 359, 360, 357};
        for (long mb : settling) {
            trimmed.add(heap.shouldTrim(mb * MB));
        }
        assertEquals(NativeHeap.SETTLING_STEPS, settling.length);
        assertFalse(trimmed.contains(true), "no trim while the plateau is learned: " + trimmed);
        assertFalse(heap.shouldTrim(360 * MB), "at the plateau");
        assertFalse(heap.shouldTrim(395 * MB), "within the slack of 10 % over 360 MB");
        assertTrue(heap.shouldTrim(397 * MB), "above 396 MB");
        assertFalse(heap.shouldTrim(250 * MB), "after a trim the plateau stays what the first steps set");
    }

    @Test
    void anUnknownResidentSetAlwaysTrims() {
        NativeHeap heap = new NativeHeap();
        assertTrue(heap.shouldTrim(-1));
        assertFalse(heap.shouldTrim(100 * MB), "the first known step only starts the plateau");
    }
}
