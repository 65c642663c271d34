package dev.finetune.trainers.data;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.TreeMap;

/**
 * Bins examples into sequences of at most {@code capacity} tokens: best-fit decreasing, O(n log n); or, to keep the
 * examples' order ({@code sample_packing_sequentially}, curriculum sampling), next-fit in that order.
 */
final class Packing {
    private Packing() {}

    /** The packing the recipe asks for: in the given order when {@code inOrder}, else best-fit decreasing. */
    static List<int[]> pack(int[] lengths, List<Integer> order, int capacity, boolean inOrder) {
        return inOrder ? inOrder(lengths, order, capacity) : pack(lengths, order, capacity);
    }

    /** Next-fit: each example joins the current sequence while it fits, else starts the next; the order is kept. */
    static List<int[]> inOrder(int[] lengths, List<Integer> order, int capacity) {
        List<int[]> out = new ArrayList<>();
        List<Integer> bin = new ArrayList<>();
        int used = 0;
        for (int example : order) {
            if (!bin.isEmpty() && used + lengths[example] > capacity) {
                out.add(bin.stream().mapToInt(Integer::intValue).toArray());
                bin = new ArrayList<>();
                used = 0;
            }
            bin.add(example);
            used += lengths[example];
        }
        if (!bin.isEmpty()) {
            out.add(bin.stream().mapToInt(Integer::intValue).toArray());
        }
        return out;
    }

    /**
     * Indices into {@code lengths}, grouped into bins. Examples are placed longest first, each into the fullest bin
     * that still has room; equal lengths keep their given order, so the caller's shuffle decides ties.
     */
    static List<int[]> pack(int[] lengths, List<Integer> order, int capacity) {
        List<Integer> sorted = new ArrayList<>(order);
        sorted.sort(Comparator.comparingInt((Integer i) -> lengths[i]).reversed());
        List<List<Integer>> bins = new ArrayList<>();
        List<Integer> room = new ArrayList<>();
        // remaining room -> bins with exactly that room, most recent last
        TreeMap<Integer, List<Integer>> byRoom = new TreeMap<>();
        for (int example : sorted) {
            int length = lengths[example];
            Integer fit = byRoom.ceilingKey(length);
            int bin;
            if (fit == null) {
                bin = bins.size();
                bins.add(new ArrayList<>());
                room.add(capacity);
            } else {
                List<Integer> candidates = byRoom.get(fit);
                bin = candidates.remove(candidates.size() - 1);
                if (candidates.isEmpty()) {
                    byRoom.remove(fit);
                }
            }
            bins.get(bin).add(example);
            int left = room.get(bin) - length;
            room.set(bin, left);
            if (left > 0) {
                byRoom.computeIfAbsent(left, k -> new ArrayList<>()).add(bin);
            }
        }
        List<int[]> out = new ArrayList<>(bins.size());
        for (List<Integer> bin : bins) {
            out.add(bin.stream().mapToInt(Integer::intValue).toArray());
        }
        return out;
    }
}
