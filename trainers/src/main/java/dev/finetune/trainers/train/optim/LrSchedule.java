package dev.finetune.trainers.train.optim;

/**
 * Learning-rate schedules as pure functions of the number of updates already made, with Hugging Face Trainer
 * semantics ({@code get_scheduler}): linear warm-up from 0, then constant, linear decay to 0, or half a cosine
 * wave to 0. Update {@code k} (1-based) uses {@code learningRate(k - 1)}, as torch's {@code LambdaLR} does, so the
 * first update of a warmed-up run has learning rate 0.
 */
public enum LrSchedule {
    CONSTANT,
    LINEAR,
    COSINE;

    /** Recipe spelling ({@code lr_scheduler}). */
    public String key() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }

    /** The schedule an {@code lr_scheduler} value names, or {@code null}; HF's {@code constant_with_warmup} is ours. */
    public static LrSchedule byKey(String key) {
        return switch (key) {
            case "cosine" -> COSINE;
            case "linear" -> LINEAR;
            case "constant", "constant_with_warmup" -> CONSTANT;
            default -> null;
        };
    }

    /**
     * @param peak {@code learning_rate}
     * @param cosineFloor {@code cosine_min_lr_ratio}: the cosine ends at {@code peak × floor} instead of 0 (Axolotl's
     *     cosine-with-min-lr); ignored by the other schedules
     * @param updatesDone optimizer updates already applied, 0 for the first update
     * @param totalUpdates the run's total number of optimizer updates
     * @param warmupUpdates from {@link #warmupUpdates}
     */
    public double learningRate(double peak, double cosineFloor, long updatesDone, long totalUpdates, long warmupUpdates) {
        if (updatesDone < warmupUpdates) {
            return peak * updatesDone / Math.max(1, warmupUpdates);
        }
        double progress = (double) (updatesDone - warmupUpdates) / Math.max(1, totalUpdates - warmupUpdates);
        return switch (this) {
            case CONSTANT -> peak;
            case LINEAR -> peak * Math.max(0.0, 1.0 - progress);
            case COSINE -> peak * (cosineFloor
                    + (1.0 - cosineFloor) * Math.max(0.0, 0.5 * (1.0 + Math.cos(Math.PI * Math.min(1.0, progress)))));
        };
    }

    /** {@code warmup_steps} when given (> 0), else {@code ceil(warmup_ratio × total)}, as the HF Trainer resolves it. */
    public static long warmupUpdates(int warmupSteps, double warmupRatio, long totalUpdates) {
        if (warmupSteps > 0) {
            return warmupSteps;
        }
        return (long) Math.ceil(warmupRatio * totalUpdates);
    }
}
