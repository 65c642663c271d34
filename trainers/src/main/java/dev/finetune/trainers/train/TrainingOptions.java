package dev.finetune.trainers.train;

import dev.finetune.trainers.train.optim.LrSchedule;
import java.nio.file.Path;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * The loop's hyperparameters, each named after the recipe key it comes from; filled from the recipe in one place.
 *
 * @param maxSteps {@code max_steps}; 0 or less: {@code num_epochs} decides
 * @param warmupSteps {@code warmup_steps}; 0 or less: {@code warmup_ratio} decides
 * @param maxGradNorm {@code max_grad_norm}; 0 or less: no clipping
 * @param evalSteps {@code eval_steps}; 0 or less: evaluate only before the first and after the last step
 * @param saveSteps {@code save_steps}; 0 or less: no checkpoints
 * @param saveTotalLimit {@code save_total_limit}; 0 or less: keep all
 * @param loggingSteps {@code logging_steps}: steps folded into one line of {@code metrics.jsonl} (at least 1)
 * @param resumeInvariants the recipe values a checkpoint is only valid for (model, adapter, dataset identity,
 *     {@code sequence_len}, …): a resume with any of them changed is refused
 * @param stopOnNonFinite {@code stop_on_nonfinite}: a NaN or infinite loss or gradient norm stops the run before
 *     the update, keeping the last checkpoint good
 */
public record TrainingOptions(
        int gradientAccumulationSteps,
        double numEpochs,
        int maxSteps,
        double learningRate,
        LrSchedule lrScheduler,
        double cosineMinLrRatio,
        int warmupSteps,
        double warmupRatio,
        double weightDecay,
        double adamBeta1,
        double adamBeta2,
        double adamEpsilon,
        double maxGradNorm,
        boolean gradientCheckpointing,
        int evalSteps,
        int saveSteps,
        int saveTotalLimit,
        int loggingSteps,
        Path outputDir,
        Resume resumeFromCheckpoint,
        long seed,
        Map<String, String> resumeInvariants,
        boolean stopOnNonFinite) {

    public TrainingOptions {
        if (gradientAccumulationSteps < 1) {
            throw new IllegalArgumentException("gradient_accumulation_steps must be at least 1");
        }
        if (maxSteps <= 0 && !(numEpochs > 0)) {
            throw new IllegalArgumentException("either max_steps or num_epochs must be positive");
        }
        Objects.requireNonNull(lrScheduler, "lr_scheduler");
        Objects.requireNonNull(outputDir, "output_dir");
        Objects.requireNonNull(resumeFromCheckpoint, "resume_from_checkpoint");
        resumeInvariants = Map.copyOf(new TreeMap<>(resumeInvariants));
    }

    /** {@code resume_from_checkpoint}: absent, {@code true} (the newest complete checkpoint) or a folder. */
    public sealed interface Resume {
        record Fresh() implements Resume {}

        record Newest() implements Resume {}

        record From(Path folder) implements Resume {}

        /** The recipe spelling: absent/{@code false} → fresh, {@code true} → newest, anything else a path. */
        static Resume parse(String value) {
            if (value == null || value.isBlank() || value.equalsIgnoreCase("false")) {
                return new Fresh();
            }
            return value.equalsIgnoreCase("true") ? new Newest() : new From(Path.of(value));
        }
    }

    /** Axolotl's and the HF Trainer's defaults; {@code output_dir} has none. */
    public static Builder builder(Path outputDir) {
        return new Builder(outputDir);
    }

    public Builder toBuilder() {
        Builder b = new Builder(outputDir);
        b.gradientAccumulationSteps = gradientAccumulationSteps;
        b.numEpochs = numEpochs;
        b.maxSteps = maxSteps;
        b.learningRate = learningRate;
        b.lrScheduler = lrScheduler;
        b.cosineMinLrRatio = cosineMinLrRatio;
        b.warmupSteps = warmupSteps;
        b.warmupRatio = warmupRatio;
        b.weightDecay = weightDecay;
        b.adamBeta1 = adamBeta1;
        b.adamBeta2 = adamBeta2;
        b.adamEpsilon = adamEpsilon;
        b.maxGradNorm = maxGradNorm;
        b.gradientCheckpointing = gradientCheckpointing;
        b.evalSteps = evalSteps;
        b.saveSteps = saveSteps;
        b.saveTotalLimit = saveTotalLimit;
        b.loggingSteps = loggingSteps;
        b.resumeFromCheckpoint = resumeFromCheckpoint;
        b.seed = seed;
        b.resumeInvariants = resumeInvariants;
        b.stopOnNonFinite = stopOnNonFinite;
        return b;
    }

    /** Named setters over the defaults, for the recipe mapping and tests. */
    public static final class Builder {
        private final Path outputDir;
        private int gradientAccumulationSteps = 1;
        private double numEpochs = 1;
        private int maxSteps = -1;
        private double learningRate = 2e-4;
        private LrSchedule lrScheduler = LrSchedule.COSINE;
        private double cosineMinLrRatio = 0;
        private int warmupSteps = 0;
        private double warmupRatio = 0;
        private double weightDecay = 0;
        private double adamBeta1 = 0.9;
        private double adamBeta2 = 0.999;
        private double adamEpsilon = 1e-8;
        private double maxGradNorm = 1.0;
        private boolean gradientCheckpointing = false;
        private int evalSteps = 0;
        private int saveSteps = 0;
        private int saveTotalLimit = 0;
        private int loggingSteps = 1;
        private Resume resumeFromCheckpoint = new Resume.Fresh();
        private long seed = 42;
        private Map<String, String> resumeInvariants = Map.of();
        private boolean stopOnNonFinite = true;

        private Builder(Path outputDir) {
            this.outputDir = outputDir;
        }

        public Builder gradientAccumulationSteps(int v) { gradientAccumulationSteps = v; return this; }
        public Builder numEpochs(double v) { numEpochs = v; return this; }
        public Builder maxSteps(int v) { maxSteps = v; return this; }
        public Builder learningRate(double v) { learningRate = v; return this; }
        public Builder lrScheduler(LrSchedule v) { lrScheduler = v; return this; }
        public Builder cosineMinLrRatio(double v) { cosineMinLrRatio = v; return this; }
        public Builder warmupSteps(int v) { warmupSteps = v; return this; }
        public Builder warmupRatio(double v) { warmupRatio = v; return this; }
        public Builder weightDecay(double v) { weightDecay = v; return this; }
        public Builder adamBeta1(double v) { adamBeta1 = v; return this; }
        public Builder adamBeta2(double v) { adamBeta2 = v; return this; }
        public Builder adamEpsilon(double v) { adamEpsilon = v; return this; }
        public Builder maxGradNorm(double v) { maxGradNorm = v; return this; }
        public Builder gradientCheckpointing(boolean v) { gradientCheckpointing = v; return this; }
        public Builder evalSteps(int v) { evalSteps = v; return this; }
        public Builder saveSteps(int v) { saveSteps = v; return this; }
        public Builder saveTotalLimit(int v) { saveTotalLimit = v; return this; }
        public Builder loggingSteps(int v) { loggingSteps = v; return this; }
        public Builder resumeFromCheckpoint(Resume v) { resumeFromCheckpoint = v; return this; }
        public Builder seed(long v) { seed = v; return this; }
        public Builder resumeInvariants(Map<String, String> v) { resumeInvariants = v; return this; }
        public Builder stopOnNonFinite(boolean v) { stopOnNonFinite = v; return this; }

        public TrainingOptions build() {
            return new TrainingOptions(gradientAccumulationSteps, numEpochs, maxSteps, learningRate, lrScheduler,
                    cosineMinLrRatio, warmupSteps, warmupRatio, weightDecay, adamBeta1, adamBeta2, adamEpsilon,
                    maxGradNorm, gradientCheckpointing, evalSteps, saveSteps, saveTotalLimit, loggingSteps, outputDir,
                    resumeFromCheckpoint, seed, resumeInvariants, stopOnNonFinite);
        }
    }
}
