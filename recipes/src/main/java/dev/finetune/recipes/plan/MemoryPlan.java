package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * The estimate for a setup and, when it does not fit, the changes that would make it fit, cheapest first.
 *
 * <p>Cost order: a smaller micro batch keeps the global batch (only speed drops); checkpointing recomputes each layer
 * (about a third more compute); LoRA and QLoRA change what is trained; FSDP needs more GPUs; a shorter sequence changes
 * the data. Each remedy is tried on its own from the original setup, and the cheap ones are also stacked in that order
 * (with the largest micro batch that fits); the list is ranked by the most expensive change each option needs.
 */
public record MemoryPlan(MemoryEstimate estimate, List<Remedy> remedies) {

    /** Sequence lengths are only shortened down to this: shorter runs rarely serve the recipe's purpose. */
    static final int SHORTEST_SEQUENCE = 256;
    /** FSDP is proposed up to this many GPUs. */
    static final int MOST_GPUS = 512;
    /** LoRA rank proposed when switching a full fine-tune to an adapter. */
    static final int PROPOSED_RANK = 16;

    public MemoryPlan {
        remedies = List.copyOf(remedies);
    }

    public static MemoryPlan of(TrainingSetup setup) {
        MemoryEstimate estimate = MemoryModel.estimate(setup);
        if (estimate.fits()) {
            return new MemoryPlan(estimate, List.of());
        }
        List<Ranked> candidates = new ArrayList<>();
        Step[] steps = Step.values();
        for (int i = 0; i < steps.length; i++) {
            Remedy r = steps[i].apply(setup);
            if (r != null && r.result().fits()) {
                candidates.add(new Ranked(r, i, 1));
            }
        }
        // Cheap changes together often beat one expensive change: stack them in cost order, each time with the
        // largest micro batch that then fits.
        TrainingSetup stacked = setup;
        List<String> changes = new ArrayList<>();
        List<String> costs = new ArrayList<>();
        for (int i = 1; i < steps.length; i++) {
            Remedy r = steps[i].apply(stacked);
            if (r == null) {
                continue;
            }
            stacked = r.result().setup();
            changes.add(r.change());
            costs.add(r.cost());
            Remedy micro = Step.MICRO_BATCH.apply(stacked);
            boolean fitsAsIs = r.result().fits();
            if (fitsAsIs || (micro != null && micro.result().fits())) {
                if (changes.size() > 1 || !fitsAsIs) {
                    List<String> c = new ArrayList<>(changes);
                    List<String> k = new ArrayList<>(costs);
                    MemoryEstimate result = r.result();
                    if (!fitsAsIs) {
                        c.add(0, micro.change());
                        k.add(0, micro.cost());
                        result = micro.result();
                    }
                    candidates.add(new Ranked(new Remedy(String.join(" + ", c), String.join("; ", k), result), i, c.size()));
                }
                break;
            }
        }
        candidates.sort(Comparator.comparingInt(Ranked::costliestStep).thenComparingInt(Ranked::changes));
        return new MemoryPlan(estimate, candidates.stream().map(Ranked::remedy).toList());
    }

    /** A remedy with its rank: the most expensive step it uses, then how many changes it needs. */
    private record Ranked(Remedy remedy, int costliestStep, int changes) {}

    private enum Step {
        MICRO_BATCH {
            Remedy apply(TrainingSetup s) {
                int micro = s.microBatch();
                // Largest divisor of the micro batch that fits, so the global batch stays exactly the same.
                for (int m = micro / 2; m >= 1; m--) {
                    if (micro % m != 0) {
                        continue;
                    }
                    TrainingSetup t = s.withMicroBatch(m, s.gradientAccumulation() * (micro / m));
                    MemoryEstimate e = MemoryModel.estimate(t);
                    if (e.fits() || m == 1) {
                        return new Remedy("micro_batch_size " + micro + " → " + m + ", gradient_accumulation_steps "
                                + s.gradientAccumulation() + " → " + t.gradientAccumulation(), "same global batch, fewer tokens per pass", e);
                    }
                }
                return null;
            }
        },
        CHECKPOINTING {
            Remedy apply(TrainingSetup s) {
                return s.gradientCheckpointing() ? null
                        : new Remedy("gradient_checkpointing: true", "about a third more compute per step",
                                MemoryModel.estimate(s.withCheckpointing(true)));
            }
        },
        LORA {
            Remedy apply(TrainingSetup s) {
                if (s.adapter() instanceof AdapterSpec.Lora) {
                    return null;
                }
                AdapterSpec lora = new AdapterSpec.Lora(PROPOSED_RANK, 2.0 * PROPOSED_RANK, 0.0, List.of(), true, false, null);
                return new Remedy("adapter: lora (lora_r: " + PROPOSED_RANK + ", lora_target_linear: true)",
                        "trains a low-rank adapter instead of every weight", MemoryModel.estimate(s.withAdapter(lora)));
            }
        },
        QLORA {
            Remedy apply(TrainingSetup s) {
                AdapterSpec.Nf4 nf4 = new AdapterSpec.Nf4(64, true);
                AdapterSpec.Lora q;
                if (s.adapter() instanceof AdapterSpec.Lora l) {
                    if (l.quantized()) {
                        return null;
                    }
                    q = new AdapterSpec.Lora(l.r(), l.alpha(), l.dropout(), l.targetModules(), l.targetAllLinear(), l.useRslora(), nf4);
                } else {
                    q = new AdapterSpec.Lora(PROPOSED_RANK, 2.0 * PROPOSED_RANK, 0.0, List.of(), true, false, nf4);
                }
                return new Remedy("adapter: qlora, load_in_4bit: true" + (s.adapter() instanceof AdapterSpec.Lora ? "" : " (lora_r: "
                        + PROPOSED_RANK + ", lora_target_linear: true)"), "4-bit base weights: slower matmuls, small quality loss",
                        MemoryModel.estimate(s.withAdapter(q)));
            }
        },
        FSDP {
            Remedy apply(TrainingSetup s) {
                Devices g = s.hardware();
                if (g.onCpu() || s.sharding().shards()) {
                    return null;
                }
                MemoryEstimate last = null;
                for (int n = 2; n <= MOST_GPUS; n *= 2) {
                    Devices more = n <= 8 ? Devices.gpus(n, 1, g.capacityPerDevice()) : Devices.gpus(8, n / 8, g.capacityPerDevice());
                    // The global batch stays: more ranks, proportionally less accumulation where it divides.
                    int accumulation = s.gradientAccumulation();
                    int oldRanks = s.ranks();
                    if (n > oldRanks && (long) accumulation * oldRanks % n == 0) {
                        accumulation = (int) ((long) accumulation * oldRanks / n);
                    }
                    TrainingSetup t = s.withSharding(Sharding.FSDP_FULL_SHARD, more).withMicroBatch(s.microBatch(), accumulation);
                    last = MemoryModel.estimate(t);
                    if (last.fits()) {
                        String batch = t.globalBatch() == s.globalBatch() ? ""
                                : ", global batch " + s.globalBatch() + " → " + t.globalBatch();
                        return new Remedy("FSDP full shard over " + more.label(), n + " GPUs instead of " + oldRanks + batch, last);
                    }
                }
                return null;
            }
        },
        SEQUENCE {
            Remedy apply(TrainingSetup s) {
                int length = s.trainedSequenceLength();
                MemoryEstimate last = null;
                for (int l = length / 2; l >= SHORTEST_SEQUENCE; l /= 2) {
                    last = MemoryModel.estimate(s.withSequenceLength(l));
                    if (last.fits()) {
                        return new Remedy("sequence_len " + length + " → " + l, "longer examples are truncated or dropped", last);
                    }
                }
                return last == null ? null
                        : new Remedy("sequence_len " + length + " → " + last.setup().trainedSequenceLength(),
                                "longer examples are truncated or dropped", last);
            }
        };

        /** The remedy applied to {@code s}, or {@code null} when it does not apply. */
        abstract Remedy apply(TrainingSetup s);
    }
}
