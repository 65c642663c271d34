package dev.finetune.recipes.plan;

import dev.finetune.recipes.BatchPlan;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelSource;
import java.nio.file.Path;

/**
 * What a validated recipe will need: memory per device, and the run's time (and cost) where the device's speed is
 * known. The one path from a recipe to its estimates, for {@code plan}, the check before training and the trainer's
 * report after its first step.
 *
 * @param time {@code null} when the speed of the device is unknown; {@link #noTime} then says what to add
 */
public record RunPlan(MemoryPlan memory, TimeModel.Estimate time, String noTime) {

    /** This machine's rates, measured by whoever has an engine (the recipes module has none). */
    public interface CpuRate {
        /** FLOP/s at the shape of {@code model}'s projections with {@code tokens} rows. */
        double flops(ModelConfig model, long tokens);

        /** What was measured, printed with the rate. */
        String how(ModelConfig model, long tokens);

        /** Bytes per second an elementwise op moves on arrays past the L2 cache. */
        double bandwidth();

        /** Seconds of one engine call on a tiny tensor: what every call costs before any arithmetic. */
        double secondsPerCall();
    }

    /** Where the plan takes the architecture from; {@link ModelSource.Unknown} where only the hub has it. */
    public static ModelSource source(ValidatedRecipe validated, Path recipeDir, Path modelConfig) {
        Recipe r = validated.recipe();
        String base = planned(r);
        return ModelSource.resolve(base, base.equals(r.model().baseModel()) ? r.model().revision() : null,
                recipeDir, modelConfig, r.model().configOverrides());
    }

    /** {@code base_model_config} where given, else {@code base_model}: the model whose shape is planned. */
    private static String planned(Recipe r) {
        return r.model().baseModelConfig() != null ? r.model().baseModelConfig() : r.model().baseModel();
    }

    /**
     * @param modelConfig a config.json for a model the built-in table does not know, or {@code null}
     * @param regime {@code null} for what the run's trainer keeps ({@link dev.finetune.recipes.ResolvedRun#precision})
     * @param cpu {@code null} to skip the time estimate on CPU
     */
    public static RunPlan of(ValidatedRecipe validated, Path recipeDir, Path modelConfig, PrecisionRegime regime,
            CpuRate cpu) {
        Recipe r = validated.recipe();
        String base = planned(r);
        ModelSource source = source(validated, recipeDir, modelConfig);
        if (source instanceof ModelSource.Unknown unknown) {
            throw unknown.asError();
        }
        ModelSource.Found found = (ModelSource.Found) source;
        BatchPlan batch = validated.plan();
        TrainingSetup setup = RecipeSetup.of(r, validated.run(), base + " (" + found.from() + ")", found.config(),
                regime, batch.micro(), batch.accumulation(), batch.generationBatch());
        Devices hardware = setup.hardware();
        MemoryPlan memory = MemoryPlan.of(setup);
        Integer maxSteps = r.training().maxSteps();
        Long totalSteps = batch.schedule() != null ? Long.valueOf(batch.schedule().totalSteps())
                : maxSteps != null && maxSteps > 0 ? Long.valueOf(maxSteps) : null;
        Recipe.Hardware.Throughput given = r.hardware().throughput();
        ComputeDevice device;
        if (hardware.onCpu()) {
            if (cpu == null) {
                return new RunPlan(memory, null, "time: not estimated (no engine to measure this CPU's matrix-multiply rate)");
            }
            long tokens = (long) setup.sequencesPerMicroBatch() * setup.trainedSequenceLength();
            device = ComputeDevice.cpu(cpu.flops(found.config(), tokens), cpu.how(found.config(), tokens), given.utilization(),
                    cpu.bandwidth(), cpu.secondsPerCall());
        } else if (given.gpu() != null) {
            device = ComputeDevice.gpu(Accelerator.lookup(given.gpu()).orElseThrow(), setup.precision(), given.peakTflops(),
                    given.utilization());
        } else if (given.peakTflops() != null) {
            device = ComputeDevice.gpu(given.peakTflops(), given.utilization());
        } else {
            return new RunPlan(memory, null, "time: not estimated: name the GPU (hardware.gpu_type: H100, one of "
                    + String.join(", ", Accelerator.names()) + ") or give its dense peak (hardware.gpu_tflops)");
        }
        return new RunPlan(memory, TimeModel.estimate(setup, device, totalSteps, given.costPerGpuHour()), null);
    }

    /** The time lines {@code plan} prints. */
    public String describeTime() {
        return time != null ? time.describe() : noTime + "\n";
    }
}
