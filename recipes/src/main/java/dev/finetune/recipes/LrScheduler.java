package dev.finetune.recipes;

import java.util.Locale;
import java.util.Set;

/**
 * {@code lr_scheduler}: the learning-rate schedules we run, as pure functions of the number of updates already made,
 * with Hugging Face Trainer semantics ({@code get_scheduler}): linear warm-up from 0, then constant, linear decay to
 * 0, or half a cosine wave to 0. Update {@code k} (1-based) uses {@code learningRate(k - 1)}, as torch's
 * {@code LambdaLR} does, so the first update of a warmed-up run has learning rate 0.
 */
public enum LrScheduler {
    COSINE,
    LINEAR,
    CONSTANT,
    /** HF's name for a constant schedule with warm-up; ours warms up whenever warm-up steps are set. */
    CONSTANT_WITH_WARMUP;

    /** Axolotl/HF schedules we recognise but do not run. */
    static final Set<String> OTHERS = Set.of("cosine_with_restarts", "polynomial", "inverse_sqrt",
            "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay",
            "one_cycle", "rex");

    /** Recipe spelling. */
    public String key() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The schedule an {@code lr_scheduler} value names, or {@code null}. */
    public static LrScheduler byKey(String key) {
        for (LrScheduler s : values()) {
            if (s.key().equals(key)) {
                return s;
            }
        }
        return null;
    }

    /**
     * @param peak {@code learning_rate}
     * @param cosineFloor {@code cosine_min_lr_ratio}: the cosine ends at {@code peak × floor} instead of 0 (Axolotl's
     *     cosine-with-min-lr); ignored by the other schedules
     * @param updatesDone optimizer updates already applied, 0 for the first update
     * @param totalUpdates the run's total number of optimizer updates
     * @param warmupUpdates from {@link SchedulePlan#warmupSteps()}
     */
    public double learningRate(double peak, double cosineFloor, long updatesDone, long totalUpdates, long warmupUpdates) {
        return learningRate(peak, cosineFloor, 0, false, updatesDone, totalUpdates, warmupUpdates);
    }

    /**
     * With Axolotl's two cosine variants: {@code lr_quadratic_warmup} (the warm-up rises as the square of its progress,
     * then the cosine falls to 0: Axolotl applies no floor then), and {@code cosine_constant_lr_ratio} (with a floor,
     * the cosine reaches it at that share of all updates and stays there). Other schedules ignore both.
     *
     * @param constantRatio {@code cosine_constant_lr_ratio}, 0 for none
     * @param quadraticWarmup {@code lr_quadratic_warmup}
     */
    public double learningRate(double peak, double cosineFloor, double constantRatio, boolean quadraticWarmup,
            long updatesDone, long totalUpdates, long warmupUpdates) {
        if (this == COSINE && quadraticWarmup) {
            if (updatesDone < warmupUpdates) {
                double rise = (double) updatesDone / Math.max(1, warmupUpdates);
                return peak * rise * rise;
            }
            double progress = (double) (updatesDone - warmupUpdates) / Math.max(1, totalUpdates - warmupUpdates);
            return peak * Math.max(0.0, 0.5 * (1.0 + Math.cos(Math.PI * progress)));
        }
        if (this == COSINE && cosineFloor > 0 && constantRatio > 0 && updatesDone >= warmupUpdates) {
            long constantFrom = (long) (totalUpdates * constantRatio);
            double progress = (double) (Math.min(updatesDone, constantFrom) - warmupUpdates)
                    / Math.max(1, constantFrom - warmupUpdates);
            return peak * (Math.max(0.0, (1 - cosineFloor) * 0.5 * (1.0 + Math.cos(Math.PI * progress))) + cosineFloor);
        }
        if (updatesDone < warmupUpdates) {
            return peak * updatesDone / Math.max(1, warmupUpdates);
        }
        double progress = (double) (updatesDone - warmupUpdates) / Math.max(1, totalUpdates - warmupUpdates);
        return switch (this) {
            case CONSTANT, CONSTANT_WITH_WARMUP -> peak;
            case LINEAR -> peak * Math.max(0.0, 1.0 - progress);
            case COSINE -> peak * (cosineFloor
                    + (1.0 - cosineFloor) * Math.max(0.0, 0.5 * (1.0 + Math.cos(Math.PI * Math.min(1.0, progress)))));
        };
    }
}
