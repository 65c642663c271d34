package dev.finetune.trainers.train;

import dev.finetune.recipes.LrScheduler;
import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.Resume;
import dev.finetune.recipes.SchedulePlan;
import java.nio.file.Path;
import java.util.Map;

/**
 * Loop settings for tests that drive the {@link Trainer} on toy models without a recipe file: the recipe types
 * with the values a test names and plain ones otherwise (constant-free AdamW defaults, no clipping unless set).
 */
public final class TestRuns {
    private final Path outputDir;
    private int accumulation = 1;
    private long maxSteps;
    private double learningRate = 2e-4;
    private LrScheduler scheduler = LrScheduler.COSINE;
    private int warmupSteps;
    private double weightDecay;
    private double maxGradNorm = 1.0;
    private boolean checkpointing;
    private int evalEvery;
    private int saveEvery;
    private int saveTotalLimit;
    private Resume resume = new Resume.Fresh();
    private long seed = 42;
    private Map<String, String> invariants = Map.of();
    private boolean stopOnNonFinite = true;
    private int logEvery = 1;
    private boolean tensorBoard;
    private dev.finetune.recipes.BestModel best;
    private boolean saveBest;
    private Double watchdogThreshold;
    private int watchdogPatience = 3;

    private TestRuns(Path outputDir) {
        this.outputDir = outputDir;
    }

    public static TestRuns in(Path outputDir) {
        return new TestRuns(outputDir);
    }

    public TestRuns accumulation(int v) { accumulation = v; return this; }
    public TestRuns maxSteps(long v) { maxSteps = v; return this; }
    public TestRuns learningRate(double v) { learningRate = v; return this; }
    public TestRuns scheduler(LrScheduler v) { scheduler = v; return this; }
    public TestRuns warmupSteps(int v) { warmupSteps = v; return this; }
    public TestRuns weightDecay(double v) { weightDecay = v; return this; }
    public TestRuns maxGradNorm(double v) { maxGradNorm = v; return this; }
    public TestRuns checkpointing(boolean v) { checkpointing = v; return this; }
    public TestRuns evalEvery(int v) { evalEvery = v; return this; }
    public TestRuns saveEvery(int v) { saveEvery = v; return this; }
    public TestRuns saveTotalLimit(int v) { saveTotalLimit = v; return this; }
    public TestRuns resume(Resume v) { resume = v; return this; }
    public TestRuns seed(long v) { seed = v; return this; }
    public TestRuns invariants(Map<String, String> v) { invariants = v; return this; }
    public TestRuns stopOnNonFinite(boolean v) { stopOnNonFinite = v; return this; }
    public TestRuns logEvery(int v) { logEvery = v; return this; }
    public TestRuns tensorBoard(boolean v) { tensorBoard = v; return this; }
    public TestRuns best(dev.finetune.recipes.BestModel v) { best = v; return this; }
    public TestRuns saveBest(boolean v) { saveBest = v; return this; }
    public TestRuns lossWatchdog(double threshold, int patience) { watchdogThreshold = threshold; watchdogPatience = patience; return this; }

    /** @param microBatchesPerEpoch the size of the training batch list the loop gets */
    public Trainer.Run build(int microBatchesPerEpoch) {
        if (maxSteps <= 0) {
            throw new IllegalStateException("tests set max_steps");
        }
        Recipe.Training training = new Recipe.Training(512, false, false, 512, false, 1, (int) maxSteps, learningRate,
                scheduler, 0, 0, false, warmupSteps, null, Optimizer.ADAMW_TORCH, weightDecay, 0.9, 0.999, 1e-8,
                maxGradNorm, checkpointing, seed, stopOnNonFinite, watchdogThreshold, watchdogPatience);
        SchedulePlan schedule = new SchedulePlan(accumulation, microBatchesPerEpoch,
                Math.max(1, microBatchesPerEpoch / accumulation), maxSteps, warmupSteps, evalEvery, saveEvery, logEvery,
                false);
        return new Trainer.Run(training, schedule, outputDir, saveTotalLimit, resume, invariants, tensorBoard, true, best,
                saveBest);
    }
}
