package dev.finetune.recipes.plan;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

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

    /**
     * The plan's bytes per device for each state a rank can count in its own tensors after the first optimizer step
     * (finetune_worker/memory.py's terms): {@code weights} (with QLoRA's NF4 linears), {@code adapter} (LoRA only),
     * {@code gradients} and {@code optimizer_state}. Every plan-vs-measured comparison of tensor bytes goes through
     * this one mapping.
     */
    public Map<String, Long> tensorTerms() {
        Map<String, Long> bytes = new LinkedHashMap<>();
        for (String name : List.of("weights", "weights_nf4", "adapter", "gradients", "optimizer_state")) {
            Term t = term(name);
            if (t != null) {
                bytes.merge(name.equals("weights_nf4") ? "weights" : name, t.in(Phase.OPTIMIZER_STEP), Long::sum);
            }
        }
        return bytes;
    }

    public Term term(String name) {
        return terms.stream().filter(t -> t.name().equals(name)).findFirst().orElse(null);
    }
}
