package dev.finetune.trainers.backend.fsdp;

import com.google.gson.FieldNamingPolicy;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import java.util.List;

/**
 * {@code plan.json}, everything the worker reads besides the batches and schedule files: a tree of records that Gson
 * writes in one call, every key present ({@code null} where a value is absent), names in snake_case. The contract is
 * {@code trainers/src/main/python/finetune_worker/plan.schema.json}; the worker loads the file into the frozen
 * dataclasses of {@code finetune_worker/plan.py}, which refuse a missing or unknown key and another format.
 * {@code WorkerPlanContractTest} checks plans this side writes against the schema, and the dataclasses against it.
 *
 * <p>To add a setting: a component in the record it belongs to (filled in {@link WorkerPlan#write}), the property
 * in the schema, the field in {@code plan.py}. The tests say which of the three is missing.
 *
 * @param format {@link #FORMAT}: the worker refuses a plan of another version
 */
public record WorkerPlanFile(String format, Model model, Parallel parallel, Data data, Training training,
        Optimizer optimizer, Objective objective, Output output) {

    /**
     * Raised when a key is renamed, removed or changes meaning. The worker ships in the same jar as this writer, and
     * its loader refuses any key it does not know, so an added key needs no new version.
     */
    public static final String FORMAT = "finetune-worker-plan-2";

    private static final Gson GSON = new GsonBuilder()
            .setFieldNamingPolicy(FieldNamingPolicy.LOWER_CASE_WITH_UNDERSCORES).serializeNulls().setPrettyPrinting()
            .disableHtmlEscaping().create();

    /**
     * @param path the base model's folder
     * @param computeDtype {@code float32} or {@code bfloat16} (FSDP2's mixed-precision policy), as the resolved run
     *     decided
     * @param precision the precision regime the plan counted ({@code PrecisionRegime.key()}), which the worker stores
     *     each kind of state in
     * @param tf32 float32 matrix multiplies on TF32 tensor cores
     * @param adapter the LoRA adapter to train, or {@code null} for a full fine-tune
     * @param kernels the fast-path pieces the worker applies to the model
     */
    public record Model(String path, String computeDtype, String precision, boolean tf32,
            boolean gradientCheckpointing, Adapter adapter, Kernels kernels) {}

    /**
     * Exactly one of {@code initial} and {@code peftInit} is set.
     *
     * @param initial the adapter folder (PEFT layout) the worker starts from: the JVM-made initial adapter, or for a
     *     family the JVM trainer does not run, {@code lora_model_dir}'s; {@code null} when PEFT makes a new one
     * @param peftInit a new adapter PEFT initialises itself (a family the JVM trainer does not run), else {@code null}
     * @param quantized QLoRA: the frozen base loaded in 4 bits (bitsandbytes NF4)
     * @param doubleQuant NF4's absmax values quantized as well
     * @param quantStorage the dtype the 4-bit weights are packed into
     */
    public record Adapter(String kind, String initial, PeftInit peftInit, boolean quantized, boolean doubleQuant,
            String quantStorage) {}

    /**
     * PEFT's own LoRA initialisation (A drawn from the seed, B = 0) on exactly the targets the plan counted.
     *
     * @param targetModules linear layers by full name
     * @param targetParameters expert and router weights by full name (PEFT's {@code target_parameters})
     */
    public record PeftInit(int r, double alpha, double dropout, boolean rslora, List<String> targetModules,
            List<String> targetParameters) {}

    /**
     * The worker's fast-path pieces ({@code finetune_worker/kernels.py}); the plain, dense, uncompiled path is the one
     * the equivalence tests hold to the JVM trainer.
     *
     * @param head {@code plain} (full logits) or {@code chunked} (the LM head inside the loss)
     * @param attention {@code dense}, {@code auto} or a packed-attention kernel
     * @param liger Liger's kernels by name ({@code rms_norm}, {@code rope}, {@code swiglu}, {@code layer_norm})
     * @param torchCompile compile each decoder layer ({@code torch_compile: auto} already decided for the device)
     * @param torchCompileBackend {@code torch_compile_backend}, or {@code null} for torch's default
     * @param torchCompileMode {@code torch_compile_mode}, or {@code null} for torch's default
     */
    public record Kernels(String head, String attention, List<String> liger, boolean activationOffloading,
            boolean torchCompile, String torchCompileBackend, String torchCompileMode) {}

    /**
     * How the ranks shard: FSDP2 per decoder layer and the root.
     *
     * @param ddpTimeoutSeconds {@code ddp_timeout}: how long a collective waits for the other ranks before it fails
     * @param layerClasses {@code fsdp_config.transformer_layer_cls_to_wrap}: the module classes FSDP wraps one by one
     *     (empty: the model's own decoder layer)
     */
    public record Parallel(int worldSize, boolean reshardAfterForward, boolean offloadParams, int ddpTimeoutSeconds,
            List<String> layerClasses) {}

    /**
     * @param batches the preprocessed micro batches ({@code finetune-batches-1})
     * @param schedule the data order and learning rate of every step ({@code finetune-schedule-1})
     * @param microBatchesPerStep over all ranks: ranks × gradient_accumulation_steps
     * @param logDir where each rank appends which micro batches it trained at each step
     */
    public record Data(String batches, String schedule, int microBatchSize, int microBatchesPerStep,
            int microBatchesPerEpoch, String logDir) {}

    /**
     * The loop's counts, as the JVM trainer's {@code Trainer.Run} has them (0: never).
     *
     * @param lossWatchdog Axolotl's loss watchdog, or {@code null} when the recipe sets none
     */
    public record Training(long totalSteps, double numEpochs, int evalSteps, int saveSteps, int saveTotalLimit,
            int loggingSteps, long seed, LossWatchdog lossWatchdog) {}

    /** Stop (with a checkpoint) once the logged loss stayed above {@code threshold} for {@code patience} steps in a row. */
    public record LossWatchdog(double threshold, int patience) {}

    /**
     * The optimizer; the learning rate of each step is in the schedule file.
     *
     * @param name the recipe's optimizer by its Axolotl name: torch's AdamW, or a bitsandbytes one
     */
    public record Optimizer(String name, double beta1, double beta2, double epsilon, double weightDecay,
            double maxGradNorm) {}

    /**
     * @param kind {@code sft}, {@code dpo} or {@code grpo}; the matching section is set, the others {@code null}
     * @param reference the resolved {@link dev.finetune.recipes.ReferenceModel}: {@code none}, {@code adapter_disabled},
     *     {@code frozen_adapter} or {@code starting_weights}
     */
    public record Objective(String kind, String reference, Dpo dpo, Grpo grpo) {}

    /** DPO's loss: the weighted sum of TRL's loss types. */
    public record Dpo(double beta, List<DpoTerm> terms) {}

    public record DpoTerm(String type, double weight) {}

    /** GRPO's sampling and loss, under TRL's names; rewards and advantages stay in Java. */
    public record Grpo(int numGenerations, int maxCompletionLength, double temperature, int topK, double topP,
            double minP, double repetitionPenalty, String lossType, double epsilon, double epsilonHigh, Double delta,
            double beta, boolean useBiasCorrectionKl, boolean maskTruncatedCompletions) {}

    /**
     * @param tokenizerFiles copied into every checkpoint and the final folder
     * @param resume the verified checkpoint to continue, or {@code null}
     * @param resumeKey the hash of what a checkpoint must agree on to be resumed
     * @param saveOnlyModel {@code save_only_model}: checkpoints without optimizer state, which cannot be resumed
     * @param checkpointWeights every checkpoint also holds the weights in Hugging Face's layout (false for
     *     {@code fsdp_config.state_dict_type: SHARDED_STATE_DICT}: the DCP shards only)
     * @param maxFileBytes a full fine-tune's safetensors files are at most this size (a larger tensor alone in one)
     * @param saveChunkBytes the most a rank copies off its device at once while it writes its rows of the weights
     */
    public record Output(String dir, List<String> tokenizerFiles, String resume, String resumeKey,
            boolean saveOnlyModel, boolean checkpointWeights, long maxFileBytes, long saveChunkBytes) {}

    /** The file's text: the one serialisation of the contract. */
    public String toJson() {
        return GSON.toJson(this) + "\n";
    }
}
