package dev.finetune.recipes;

import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * One resolved, validated recipe: every Axolotl key we act on, typed, with Axolotl's defaults applied. Built only
 * by {@link RecipeReader}; derived numbers (the batch plan, memory) live elsewhere and are never written back.
 *
 * <p>Nullable fields mean "not written and no default": the reader fills every default Axolotl itself applies.
 */
public record Recipe(
        Model model,
        AdapterSpec adapter,
        Data data,
        Training training,
        Batch batch,
        Precision precision,
        Objective objective,
        Distributed distributed,
        Hardware hardware,
        Backend backend,
        Output output,
        Speedups speedups) {

    /**
     * @param baseModel hub id ({@code meta-llama/Llama-3.1-8B}) or local directory as written
     * @param specialTokens {@code special_tokens}: {@code bos_token}, {@code eos_token}, {@code pad_token}, ... → text
     * @param chatTemplate {@code chat_template} name, or {@code null} for the tokenizer's own / none
     * @param eotTokens {@code eot_tokens}: the tokens that end a turn, for {@code train_on_eot}; empty = the EOS token
     * @param chatTemplateKwargs {@code chat_template_kwargs}: extra variables every template rendering sees
     * @param defaultSystemMessage {@code default_system_message}: the system turn of a conversation that has none,
     *     or {@code null}
     * @param revision {@code revision_of_model}: the hub branch, tag or commit of a hub {@code base_model};
     *     {@code null} for {@code main}
     * @param configOverrides {@code overrides_of_model_config} (or Axolotl's alias {@code model_config}): config.json
     *     values replaced before the model is built (model/ConfigOverrides); empty when none
     */
    public record Model(
            String baseModel,
            String baseModelConfig,
            String tokenizerConfig,
            boolean trustRemoteCode,
            Map<String, String> specialTokens,
            String chatTemplate,
            String chatTemplateJinja,
            List<String> eotTokens,
            Map<String, Object> chatTemplateKwargs,
            String defaultSystemMessage,
            String revision,
            Map<String, Object> configOverrides) {}

    /**
     * @param valSetSize fraction of the training rows held out for evaluation (0 = none)
     * @param preparedPath {@code dataset_prepared_path}: where tokenized/packed data is cached, or {@code null}
     * @param excessLength {@code excess_length_strategy}: what happens to an example longer than {@code sequence_len}
     * @param skipInvalidRows {@code dataset_skip_invalid_rows} (ours; Axolotl stops at a broken row): skip and count
     *     rows that cannot be read instead of stopping
     * @param selection which examples are kept and in what order (shuffles, dedup, shards, minimum length)
     */
    public record Data(
            List<DatasetSpec> datasets,
            List<DatasetSpec> testDatasets,
            double valSetSize,
            String preparedPath,
            boolean trainOnInputs,
            ExcessLength excessLength,
            boolean skipInvalidRows,
            DataSelection selection) {}

    /** Axolotl's {@code excess_length_strategy}; {@code drop} is its default. */
    public enum ExcessLength {
        DROP, TRUNCATE, RAISE
    }

    /**
     * @param maxSteps overrides {@code numEpochs} when set
     * @param warmupSteps exclusive with {@code warmupRatio}; when both are null the trainer uses min(3 % of steps, 100)
     * @param cosineConstantLrRatio {@code cosine_constant_lr_ratio}: with a cosine floor, the share of the steps after
     *     which the learning rate stays at the floor (0: none)
     * @param lrQuadraticWarmup {@code lr_quadratic_warmup}: cosine's warm-up rises quadratically
     * @param evalSamplePacking {@code eval_sample_packing}: evaluation rows are packed (follows sample_packing)
     * @param lossWatchdogThreshold {@code loss_watchdog_threshold}: training stops when the logged loss stays above it
     *     for {@code lossWatchdogPatience} steps in a row (Axolotl's loss watchdog), or {@code null}
     * @param evalSequenceLen {@code eval_sequence_len}: the longest example of {@code test_datasets} (sequence_len
     *     when not written; held-out rows of the training data were cut at sequence_len)
     */
    public record Training(
            int sequenceLen,
            boolean samplePacking,
            boolean evalSamplePacking,
            int evalSequenceLen,
            boolean padToSequenceLen,
            double numEpochs,
            Integer maxSteps,
            double learningRate,
            LrScheduler lrScheduler,
            double cosineMinLrRatio,
            double cosineConstantLrRatio,
            boolean lrQuadraticWarmup,
            Integer warmupSteps,
            Double warmupRatio,
            Optimizer optimizer,
            double weightDecay,
            double adamBeta1,
            double adamBeta2,
            double adamEpsilon,
            double maxGradNorm,
            boolean gradientCheckpointing,
            long seed,
            boolean stopOnNonFinite,
            Double lossWatchdogThreshold,
            int lossWatchdogPatience) {}

    /**
     * The three batch keys exactly as written ({@code null} = absent); {@link BatchPlan} derives the rest.
     *
     * @param batchSize Axolotl's {@code batch_size}: micro × accumulation per data-parallel rank
     */
    public record Batch(
            Integer microBatchSize,
            Integer gradientAccumulationSteps,
            Integer batchSize,
            Integer evalBatchSize) {}

    /**
     * {@code bf16}, {@code fp16}, {@code tf32} and {@code precision} as written: {@code auto} is resolved against the
     * device, once, into the run's precision regime ({@link ResolvedRun#precision}).
     *
     * @param regime {@code precision:}, the torch worker's regime by name, or {@code null} for auto
     */
    public record Precision(Flag bf16, Flag fp16, Flag tf32, dev.finetune.recipes.plan.PrecisionRegime regime) {

        public Precision(Flag bf16, Flag fp16, Flag tf32) {
            this(bf16, fp16, tf32, null);
        }
    }

    public enum Flag { TRUE, FALSE, AUTO }

    /**
     * Speed-only settings of the torch worker: they change how it computes, never what (the worker's tests hold each to
     * its plain path). The JVM trainer already runs each layer as one compiled TorchScript module and ignores them.
     *
     * @param torchCompile {@code torch_compile}: compile each decoder layer (true; auto: on a GPU)
     * @param compileBackend {@code torch_compile_backend}, or null for torch's default (inductor)
     * @param compileMode {@code torch_compile_mode}, or null for torch's default
     * @param liger the fused kernels the {@code liger_*} keys ask for, by Liger's own names ({@link #LIGER_KERNELS})
     * @param activationOffloading {@code activation_offloading}: the checkpointed layer inputs wait in CPU memory
     */
    public record Speedups(Flag torchCompile, String compileBackend, String compileMode, List<String> liger,
            boolean activationOffloading) {

        /** The recipe key of each Liger kernel the worker applies, and Liger's name for it. */
        public static final Map<String, String> LIGER_KERNELS = Map.of("liger_rms_norm", "rms_norm", "liger_rope",
                "rope", "liger_swiglu", "swiglu", "liger_glu_activation", "swiglu", "liger_layer_norm", "layer_norm");

        public static final Speedups NONE = new Speedups(Flag.FALSE, null, null, List.of(), false);

        public Speedups {
            liger = List.copyOf(new java.util.TreeSet<>(liger));
        }

        /** Whether the worker compiles its decoder layers on this kind of device. */
        public boolean compiles(boolean gpu) {
            return torchCompile == Flag.TRUE || (torchCompile == Flag.AUTO && gpu);
        }
    }

    /** What the loss is: supervised next-token prediction, or a preference / reinforcement objective. */
    public sealed interface Objective {
        /** The {@code rl} value that selects it ({@code sft} when {@code rl} is absent). */
        String key();

        /** Exhaustive choice over the three objectives: adding one breaks every caller until it handles it. */
        <R> R match(Function<Sft, R> sft, Function<Dpo, R> dpo, Function<Grpo, R> grpo);

        record Sft() implements Objective {
            public String key() {
                return "sft";
            }

            public <R> R match(Function<Sft, R> sft, Function<Dpo, R> dpo, Function<Grpo, R> grpo) {
                return sft.apply(this);
            }
        }

        /**
         * {@code rl: dpo}; {@code beta} from {@code rl_beta} / {@code trl.beta} (TRL's default 0.1).
         *
         * @param lossTypes {@code dpo_loss_type}: sigmoid (DPO) by default; several are summed
         * @param lossWeights {@code dpo_loss_weights}, one per loss type (1 each when not given)
         */
        record Dpo(double beta, double labelSmoothing, boolean precomputeRefLogProbs, List<DpoLossType> lossTypes,
                List<Double> lossWeights) implements Objective {
            public Dpo {
                lossTypes = List.copyOf(lossTypes);
                lossWeights = List.copyOf(lossWeights);
                if (lossTypes.isEmpty() || lossTypes.size() != lossWeights.size()) {
                    throw new IllegalArgumentException(lossTypes + " with weights " + lossWeights);
                }
            }

            /** One loss with weight 1. */
            public Dpo(double beta, double labelSmoothing, boolean precomputeRefLogProbs, DpoLossType lossType) {
                this(beta, labelSmoothing, precomputeRefLogProbs, List.of(lossType), List.of(1.0));
            }

            public String key() {
                return "dpo";
            }

            public <R> R match(Function<Sft, R> sft, Function<Dpo, R> dpo, Function<Grpo, R> grpo) {
                return dpo.apply(this);
            }
        }

        /**
         * {@code rl: grpo} with its {@code trl:} block.
         *
         * @param numGenerations completions sampled per prompt (TRL's default 8)
         * @param generationBatchSize completions generated per step, or {@code null} for micro × accumulation
         * @param rewardFuncs built-ins with their parameters, or commands (docs/post-training.md)
         * @param epsilonHigh {@code trl.epsilon_high}: the upper clipping range ({@code epsilon} when not given)
         * @param delta {@code trl.delta}: the upper bound of the unclipped ratio (two-sided clipping), or {@code null}
         * @param maskTruncatedCompletions {@code trl.mask_truncated_completions}: completions cut at
         *     {@code max_completion_length} without EOS take no part in the loss
         * @param biasCorrectedKl {@code trl.use_bias_correction_kl} (TRL's default true): the KL term is weighted by
         *     the policy ratio
         */
        record Grpo(
                int numGenerations,
                Integer generationBatchSize,
                int maxCompletionLength,
                double temperature,
                double beta,
                double epsilon,
                List<RewardSpec> rewardFuncs,
                List<Double> rewardWeights,
                ScaleRewards scaleRewards,
                boolean useVllm,
                GrpoLossType lossType,
                double epsilonHigh,
                Double delta,
                Sampling sampling,
                boolean maskTruncatedCompletions,
                boolean biasCorrectedKl) implements Objective {
            public String key() {
                return "grpo";
            }

            /** The same objective generating {@code batch} completions of at most {@code length} tokens a round. */
            public Grpo sized(Integer batch, int length) {
                return new Grpo(numGenerations, batch, length, temperature, beta, epsilon, rewardFuncs, rewardWeights,
                        scaleRewards, useVllm, lossType, epsilonHigh, delta, sampling, maskTruncatedCompletions, biasCorrectedKl);
            }

            public <R> R match(Function<Sft, R> sft, Function<Dpo, R> dpo, Function<Grpo, R> grpo) {
                return grpo.apply(this);
            }
        }

        /**
         * GRPO's sampling filters, TRL's (and transformers') names and defaults.
         *
         * @param topK 0 keeps every token
         * @param topP 1 keeps every token
         * @param minP drop tokens below this share of the likeliest one's probability; 0 keeps every token
         * @param repetitionPenalty divides positive (multiplies negative) logits of tokens already in the row; 1 is off
         */
        record Sampling(int topK, double topP, double minP, double repetitionPenalty) {
            public static final Sampling NONE = new Sampling(0, 1, 0, 1);
        }
    }

    /**
     * Parallelism beyond one device. {@code fsdp} is {@code null} when sharding is off.
     */
    /** @param ddpTimeoutSeconds {@code ddp_timeout}: how long a collective waits for the other ranks */
    public record Distributed(Fsdp fsdp, int contextParallelSize, int tensorParallelSize, int ddpTimeoutSeconds) {
        public boolean sharded() {
            return fsdp != null;
        }
    }

    /**
     * {@code fsdp_config} after Axolotl's normalisation ({@code fsdp_} prefixes stripped, version hoisted).
     *
     * @param reshardAfterForward FSDP2's switch between full sharding (true) and ZeRO-2-like (false)
     */
    public record Fsdp(
            int version,
            boolean offloadParams,
            boolean reshardAfterForward,
            boolean activationCheckpointing,
            boolean cpuRamEfficientLoading,
            String stateDictType,
            String autoWrapPolicy,
            String transformerLayerClsToWrap) {}

    /** Our addition ({@code hardware:}): where the recipe is meant to run, for the plan and backend choice. */
    public sealed interface Hardware {
        record Unspecified() implements Hardware {}

        /** @param throughput what the time estimate may use instead of its assumptions */
        record Cpu(Throughput throughput) implements Hardware {
            public Cpu() {
                this(Throughput.NONE);
            }
        }

        /** @param gpuMemoryBytes per GPU, or {@code null} when not given */
        record Gpus(int perNode, int nodes, Long gpuMemoryBytes, Throughput throughput) implements Hardware {
            public Gpus(int perNode, int nodes, Long gpuMemoryBytes) {
                this(perNode, nodes, gpuMemoryBytes, Throughput.NONE);
            }

            public int total() {
                return perNode * nodes;
            }
        }

        /**
         * What the time estimate reads from {@code hardware:}, each {@code null} when not written.
         *
         * @param gpu a GPU of the plan's device table ({@code hardware.gpu_type}: H100, A100-40GB, RTX-4090, ...)
         * @param peakTflops {@code hardware.gpu_tflops}: the dense peak at the training's dtype, instead of the table's
         * @param utilization {@code hardware.utilization}: the share of the peak a step reaches, instead of the plan's
         * @param costPerGpuHour {@code hardware.cost_per_gpu_hour}: the price of one GPU for an hour
         */
        record Throughput(String gpu, Double peakTflops, Double utilization, Double costPerGpuHour) {
            public static final Throughput NONE = new Throughput(null, null, null, null);
        }

        default Throughput throughput() {
            return this instanceof Gpus g ? g.throughput() : this instanceof Cpu c ? c.throughput() : Throughput.NONE;
        }

        /** Bounds that keep every product of device counts exact in an int; far beyond any real cluster. */
        int MAX_GPUS_PER_NODE = 1024;
        int MAX_NODES = 65536;

        /** Processes that each hold one device; CPU and unspecified count as one. */
        default int devices() {
            return this instanceof Gpus g ? g.total() : 1;
        }
    }

    /** Our addition ({@code backend:}): run in this JVM on one device, or through torchrun/FSDP2. */
    public enum Backend { AUTO, SINGLE, FSDP }

    /**
     * @param resume {@code resume_from_checkpoint}, with {@code auto_resume_from_checkpoints} folded in
     * @param saveSteps / evalSteps an integer step count, or a fraction (&lt; 1) of the total steps
     * @param overwriteOutputDir the user asked to delete an earlier or foreign run's files from output_dir first
     * @param best the metric save_strategy: best, early stopping and load_best_model_at_end watch, or {@code null}
     *     when none of them is on
     * @param saveOnlyModel {@code save_only_model}: the worker's checkpoints hold the weights without optimizer state
     */
    public record Output(
            String outputDir,
            Resume resume,
            String loraModelDir,
            SaveStrategy saveStrategy,
            Double saveSteps,
            Integer savesPerEpoch,
            int saveTotalLimit,
            EvalStrategy evalStrategy,
            Double evalSteps,
            Integer evalsPerEpoch,
            Integer loggingSteps,
            BestModel best,
            boolean overwriteOutputDir,
            boolean useTensorboard,
            boolean saveOnlyModel) {

        public Output(String outputDir, Resume resume, String loraModelDir, SaveStrategy saveStrategy, Double saveSteps,
                Integer savesPerEpoch, int saveTotalLimit, EvalStrategy evalStrategy, Double evalSteps,
                Integer evalsPerEpoch, Integer loggingSteps, BestModel best, boolean overwriteOutputDir,
                boolean useTensorboard) {
            this(outputDir, resume, loraModelDir, saveStrategy, saveSteps, savesPerEpoch, saveTotalLimit, evalStrategy,
                    evalSteps, evalsPerEpoch, loggingSteps, best, overwriteOutputDir, useTensorboard, false);
        }
    }
}
