package dev.finetune.trainers.train;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.SchedulePlan;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.optim.LrSchedule;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;

/**
 * The one place where a {@link Recipe} becomes the loop's {@link TrainingOptions}, with Axolotl's and the HF
 * Trainer's resolution rules for what the recipe leaves open or gives as fractions.
 */
public final class RecipeOptions {
    private RecipeOptions() {}

    /**
     * @param gradientAccumulationSteps resolved by the batch plan from the three batch keys
     * @param microBatchesPerEpoch the training data's size in micro batches (after packing)
     * @param datasetIdentity a fingerprint of the training data (files and their contents); a checkpoint is
     *     only valid for the same data
     */
    public static TrainingOptions from(Recipe recipe, int gradientAccumulationSteps, int microBatchesPerEpoch,
            String datasetIdentity) {
        Recipe.Training training = recipe.training();
        Recipe.Output output = recipe.output();
        LrSchedule schedule = LrSchedule.byKey(training.lrScheduler().key());
        if (schedule == null) {
            throw new UserError("lr_scheduler", "the single-device trainer has no '" + training.lrScheduler()
                    + "' schedule", "use cosine, linear or constant");
        }
        // every 32-bit AdamW spelling (8 bytes of moments per parameter) is the same update; 8/4-bit and SGD are not
        if (training.optimizer() != null && training.optimizer().stateBytesPerParam() != 8) {
            throw new UserError("optimizer", "the single-device trainer runs 32-bit AdamW, not '"
                    + training.optimizer().axolotlName() + "'", "use optimizer: adamw_torch");
        }
        TrainingOptions.Builder options = TrainingOptions.builder(Path.of(output.outputDir()))
                .gradientAccumulationSteps(gradientAccumulationSteps)
                .numEpochs(training.numEpochs())
                .maxSteps(training.maxSteps() == null ? -1 : training.maxSteps())
                .learningRate(training.learningRate())
                .lrScheduler(schedule)
                .cosineMinLrRatio(training.cosineMinLrRatio())
                .weightDecay(training.weightDecay())
                .adamBeta1(training.adamBeta1())
                .adamBeta2(training.adamBeta2())
                .adamEpsilon(training.adamEpsilon())
                .maxGradNorm(training.maxGradNorm())
                .gradientCheckpointing(training.gradientCheckpointing())
                .stopOnNonFinite(training.stopOnNonFinite())
                .saveTotalLimit(output.saveTotalLimit())
                .seed(training.seed())
                .resumeFromCheckpoint(resume(output))
                .resumeInvariants(resumeInvariants(recipe, datasetIdentity));
        SchedulePlan plan = SchedulePlan.of(recipe, gradientAccumulationSteps, microBatchesPerEpoch, false);
        options.warmupSteps((int) plan.warmupSteps());
        options.evalSteps(plan.evalEvery());
        options.saveSteps(plan.saveEvery());
        options.loggingSteps(plan.logEvery());
        return options.build();
    }

    private static TrainingOptions.Resume resume(Recipe.Output output) {
        if (output.resume() instanceof dev.finetune.recipes.Resume.From from) {
            return new TrainingOptions.Resume.From(from.folder());
        }
        return output.resume() instanceof dev.finetune.recipes.Resume.Newest ? new TrainingOptions.Resume.Newest()
                : new TrainingOptions.Resume.Fresh();
    }

    /** What a checkpoint is only valid for: the weights' shapes and meaning, and the data stream's composition. */
    static Map<String, String> resumeInvariants(Recipe recipe, String datasetIdentity) {
        Map<String, String> keys = new TreeMap<>();
        keys.put("base_model", recipe.model().baseModel());
        // by recipe key, so a refusal names the key that changed ("lora_r: 8 → 4")
        if (recipe.adapter() instanceof AdapterSpec.Lora lora) {
            keys.put("adapter", lora.quantized() ? "qlora" : "lora");
            keys.put("lora_r", Integer.toString(lora.r()));
            keys.put("lora_alpha", Double.toString(lora.alpha()));
            keys.put("lora_target_modules", String.valueOf(lora.targetModules()));
            keys.put("lora_target_linear", Boolean.toString(lora.targetAllLinear()));
            keys.put("peft_use_rslora", Boolean.toString(lora.useRslora()));
            if (lora.quantized()) {
                keys.put("bnb_4bit", String.valueOf(lora.quantization()));
            }
        } else {
            keys.put("adapter", "full");
        }
        keys.put("datasets", datasetIdentity);
        // checkpoints of one objective are not a starting point for another (DPO's reference, GRPO's groups)
        keys.put("rl", recipe.objective() instanceof Recipe.Objective.Dpo ? "dpo"
                : recipe.objective() instanceof Recipe.Objective.Grpo ? "grpo" : "sft");
        keys.put("sequence_len", Integer.toString(recipe.training().sequenceLen()));
        keys.put("sample_packing", Boolean.toString(recipe.training().samplePacking()));
        keys.put("micro_batch_size", String.valueOf(recipe.batch().microBatchSize()));
        keys.put("train_on_inputs", Boolean.toString(recipe.data().trainOnInputs()));
        keys.put("chat_template", String.valueOf(recipe.model().chatTemplate()));
        return keys;
    }
}
