package dev.finetune.recipes.plan;

import java.util.List;

/** Bytes per device, term by term and phase by phase, for one {@link TrainingSetup}. */
public record MemoryEstimate(TrainingSetup setup, List<Term> terms, List<Phase> phases) {

    public MemoryEstimate {
        terms = List.copyOf(terms);
        phases = List.copyOf(phases);
    }

    public long total(Phase phase) {
        return terms.stream().mapToLong(t -> t.in(phase)).sum();
    }

    /** The phase with the most live memory; the earlier phase wins a tie. */
    public Phase peakPhase() {
        Phase best = phases.get(0);
        for (Phase p : phases) {
            if (total(p) > total(best)) {
                best = p;
            }
        }
        return best;
    }

    public long peakBytes() {
        return total(peakPhase());
    }

    public long capacityBytes() {
        return setup.hardware().capacityPerDevice();
    }

    public boolean fits() {
        return peakBytes() <= capacityBytes();
    }

    /** Capacity minus peak: spare memory when positive, the shortfall when negative. */
    public long headroomBytes() {
        return capacityBytes() - peakBytes();
    }

    public Term term(String name) {
        return terms.stream().filter(t -> t.name().equals(name)).findFirst().orElse(null);
    }
}
