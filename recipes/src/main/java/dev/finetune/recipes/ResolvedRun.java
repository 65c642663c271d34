package dev.finetune.recipes;

import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.plan.Devices;
import dev.finetune.recipes.plan.PrecisionRegime;
import dev.finetune.recipes.plan.Sharding;

/**
 * The decisions about how a validated recipe runs, made once, here, from the recipe and the command line's
 * {@link LaunchShape}: which trainer, on which kind of device, over how many ranks, in which precision, against which
 * reference model, with or without activation checkpointing. {@code validate}, {@code plan}, the batch line,
 * {@code --dry-run}, both backends and the worker plan read these; none of them decides again.
 *
 * <p>The backend follows the device: the JVM trainer's engine natives compute on the CPU only, so a run on a CUDA
 * device, one GPU included, is the torch worker's (at world size 1 as one plain process, no torchrun, no FSDP), and
 * a run on the CPU stays in this JVM unless the recipe asks for the worker ({@code backend: fsdp}, sharding, several
 * ranks). {@code backend: single} keeps meaning "one device".
 *
 * @param backend which trainer runs it; never the recipe's {@code auto}
 * @param device the kind of device each rank computes on
 * @param perNode ranks (processes, one device each) on each node
 * @param nodes machines
 * @param gpuMemory bytes of one GPU when the recipe or the command line says, else {@code null} (always on CPU)
 * @param precision what each kind of state costs per parameter, as the trainer that runs it keeps it
 * @param reference what DPO and GRPO compare the policy with
 * @param activationCheckpointing {@code gradient_checkpointing} or {@code fsdp_config.activation_checkpointing}
 */
public record ResolvedRun(Backend backend, Device device, int perNode, int nodes, Long gpuMemory,
        PrecisionRegime precision, ReferenceModel reference, boolean activationCheckpointing) {

    /** Which trainer runs the recipe. */
    public enum Backend {
        /** This JVM, one device: the DJL trainer. */
        SINGLE,
        /**
         * The Python torch worker: under torchrun with FSDP2 over several ranks, one plain process at world size 1
         * (one GPU, or one CPU rank under {@code backend: fsdp}).
         */
        FSDP
    }

    /** The kind of device a rank computes on. */
    public enum Device { CPU, CUDA }

    public ResolvedRun {
        if (perNode < 1 || nodes < 1 || (backend == Backend.SINGLE && perNode * nodes != 1)) {
            throw new IllegalArgumentException(backend + " over " + perNode + " x " + nodes);
        }
    }

    /** Data-parallel ranks: every process of every node. */
    public int worldSize() {
        return perNode * nodes;
    }

    /**
     * The one choice of backend, device and ranks. Errors (a launch flag the recipe's backend cannot take, two flags
     * that disagree, a model the named backend cannot run) go to {@code problems} beside the recipe's own; the run
     * returned then is only a placeholder.
     *
     * @param model the architecture when it is known here (a local folder or the built-in table), else {@code null}:
     *     {@code auto} gives a family the JVM trainer does not implement to the worker, at world size 1 too
     */
    static ResolvedRun resolve(Recipe recipe, LaunchShape shape, ModelConfig model, Problems problems, Object where) {
        Recipe.Hardware.Gpus declared = recipe.hardware() instanceof Recipe.Hardware.Gpus g ? g : null;
        // a recipe without hardware: is planned and run on this machine's CPU
        Device device = !shape.cpu() && (shape.namesGpus() || declared != null) ? Device.CUDA : Device.CPU;
        Integer perNode = agree(shape.nprocPerNode(), "--nproc-per-node", shape.gpus(), "--gpus", problems);
        Integer nodes = agree(shape.nnodes(), "--nnodes", shape.gpuNodes(), "--nodes", problems);
        if (device == Device.CUDA && declared != null) {
            perNode = perNode != null ? perNode : declared.perNode();
            nodes = nodes != null ? nodes : declared.nodes();
        }
        perNode = perNode != null ? perNode : 1;
        nodes = nodes != null ? nodes : 1;
        String notInJvm = model == null ? null : model.notInJvmBecause();
        // a CUDA device is the worker's whatever the count: the JVM trainer would run on the CPU beside it
        Backend backend = switch (recipe.backend()) {
            case SINGLE -> device == Device.CUDA ? Backend.FSDP : Backend.SINGLE;
            case FSDP -> Backend.FSDP;
            case AUTO -> recipe.distributed().sharded() || perNode * nodes > 1 || shape.asksForTorchrun()
                    || notInJvm != null || device == Device.CUDA ? Backend.FSDP : Backend.SINGLE;
        };
        if (backend == Backend.SINGLE && notInJvm != null) {
            problems.error(problems.at("backend", where), notInJvm,
                    "the fsdp backend (transformers on the worker) runs every supported family, on CPU ranks at world "
                            + "size 1 too: backend: fsdp, or backend: auto");
        }
        if (notInJvm != null && device == Device.CPU && recipe.adapter() instanceof AdapterSpec.Lora lora
                && lora.quantized()) {
            // on the CPU QLoRA is the JVM trainer's (its NF4 weights; the worker's is bitsandbytes', CUDA only), and
            // the JVM trainer does not run this model
            problems.error(problems.at("adapter", where), "QLoRA on this model is unsupported on the CPU: QLoRA runs "
                    + "on the CPU in the single-device trainer only, and " + notInJvm,
                    "train it on a GPU (hardware: {gpus: 1}: the torch worker with bitsandbytes), or use adapter: lora "
                            + "(the fsdp worker trains it, on CPU ranks too)");
        }
        // (hardware: with several devices under backend: single is the recipe's own error, found by validation)
        if (recipe.backend() == Recipe.Backend.SINGLE && backend == Backend.FSDP && perNode * nodes > 1
                && (declared == null || declared.perNode() * declared.nodes() == 1)) {
            problems.error(problems.at("backend", where), "backend: single means one device, and the launch asks for "
                    + perNode * nodes + " ranks", "drop --nproc-per-node/--nnodes/--gpus/--nodes, or use backend: fsdp");
            perNode = 1;
            nodes = 1;
        }
        if (backend == Backend.SINGLE) {
            if (shape.asksForTorchrun()) {
                problems.error(problems.at("backend", where), "--nproc-per-node and --nnodes belong to the fsdp "
                        + "backend, and this recipe runs on the single-device one",
                        "add backend=fsdp to the command line (or backend: fsdp to the recipe)");
            }
            // the single-device trainer uses one of the devices a plan offers it
            perNode = 1;
            nodes = 1;
        }
        Long gpuMemory = device == Device.CPU ? null
                : shape.gpuMemory() != null ? shape.gpuMemory() : declared != null ? declared.gpuMemoryBytes() : null;
        Recipe.Fsdp fsdp = recipe.distributed().fsdp();
        refuseUnrunPrecision(recipe, backend, device, problems, where);
        return new ResolvedRun(backend, device, perNode, nodes, gpuMemory, regime(recipe, backend, device),
                ReferenceModel.of(recipe), recipe.training().gradientCheckpointing()
                        || (fsdp != null && fsdp.activationCheckpointing()));
    }

    /**
     * {@code recipe} with {@code shape}, outside validation (tests, and callers that hold a {@link Recipe} only); a
     * launch problem is thrown.
     */
    public static ResolvedRun of(Recipe recipe, LaunchShape shape) {
        Problems problems = new Problems();
        ResolvedRun run = resolve(recipe, shape, null, problems, "launch");
        if (!problems.errors.isEmpty()) {
            throw new InvalidRecipe(problems.errors, problems.warnings);
        }
        return run;
    }

    /**
     * How {@code finetune generate} runs a saved model, decided here once like a recipe's backend: the in-JVM model
     * where it implements the architecture, else the torch worker (transformers, one plain process), as
     * {@code backend: auto} gives such a model to the worker for training on this CPU. Either computes in float32 on
     * the CPU (the JVM's engine natives are CPU-only; the worker then does the same arithmetic the tests compare).
     */
    public static ResolvedRun forGeneration(ModelConfig model) {
        return new ResolvedRun(model.notInJvmBecause() == null ? Backend.SINGLE : Backend.FSDP, Device.CPU, 1, 1, null,
                PrecisionRegime.FP32, new ReferenceModel.None(), false);
    }

    /** The line {@code generate} prints (on stderr) about the engine that generates, and why when it is the worker. */
    public String describeGeneration(ModelConfig model) {
        return backend == Backend.SINGLE ? "run: generate with the in-JVM model (this JVM) on CPU, float32\n"
                : "run: generate with the torch worker (transformers, one process, no torchrun) on CPU, float32: "
                        + model.notInJvmBecause() + "\n";
    }

    private static Integer agree(Integer launch, String launchFlag, Integer planned, String plannedFlag,
            Problems problems) {
        if (launch != null && planned != null && !launch.equals(planned)) {
            problems.error(launchFlag, launchFlag + " " + launch + " and " + plannedFlag + " " + planned + " disagree",
                    "give one of them");
        }
        return launch != null ? launch : planned;
    }

    /**
     * What a recipe costs per parameter, read the way the trainer that runs it keeps its state: fp32 throughout on
     * CPU (the JVM trainer, with bf16 copies of the weights for the matmuls under {@code bf16: true}; the worker
     * computes in fp32 on CPU); on GPU with bf16 the model is loaded in 16 bits, so a full fine-tune keeps
     * gradients and torch AdamW's moments in 16 bits too (pure bf16, 8 B/param, as HF Trainer and torchtune do),
     * while LoRA adapters are kept in fp32 by PEFT (16 B per adapter parameter, the mixed-precision row).
     * The recipe's {@code precision:} names the worker's regime outright (the worker stores each kind of state in
     * that regime's dtypes, on CPU too); the JVM trainer has no such choice. {@code plan --precision} overrides it
     * for a what-if.
     */
    static PrecisionRegime regime(Recipe recipe, Backend backend, Device device) {
        Recipe.Precision written = recipe.precision();
        if (backend == Backend.FSDP && written.regime() != null) {
            return written.regime();
        }
        if (device == Device.CPU) {
            // bfloat16 matmuls and attention over float32 state, as torch's CPU autocast runs a model; bf16: auto means
            // float32 on a CPU, as Axolotl's auto looks for a GPU
            return backend == Backend.SINGLE && written.bf16() == Recipe.Flag.TRUE ? PrecisionRegime.CPU_BF16_AUTOCAST
                    : PrecisionRegime.FP32;
        }
        // (fp16: true is refused: refuseUnrunPrecision)
        boolean sixteenBit = written.bf16() != Recipe.Flag.FALSE;
        if (!sixteenBit) {
            return PrecisionRegime.FP32;
        }
        return recipe.adapter() instanceof AdapterSpec.Lora ? PrecisionRegime.MIXED_FP32_MASTER : PrecisionRegime.BF16_PURE;
    }

    /**
     * Precision settings the trainer that runs the recipe would not carry out, refused here with the precision itself.
     * {@code fp16: true} is float16 compute with loss scaling (a GradScaler), which neither trainer has: the worker
     * would have computed in bfloat16 and the JVM trainer in float32, each silently. {@code precision:} names how the
     * worker stores each kind of state; the JVM trainer keeps fp32 state (its engine cannot hold bfloat16 tensors), so
     * any other regime there would be a promise the plan prints and the run breaks.
     */
    private static void refuseUnrunPrecision(Recipe recipe, Backend backend, Device device, Problems problems,
            Object where) {
        Recipe.Precision written = recipe.precision();
        String trainer = backend == Backend.SINGLE ? "the single-device trainer" : "the torch worker";
        String on = device == Device.CPU ? "CPU" : "CUDA";
        Object fp16At = problems.at("fp16", where);
        // bf16 and fp16 both true is the reader's error, at this line already: one mistake, one error
        if (written.fp16() == Recipe.Flag.TRUE && problems.errors.stream()
                .noneMatch(f -> f.where().equals(String.valueOf(fp16At)))) {
            problems.error(fp16At, "fp16: true (float16 compute with loss scaling) is unsupported "
                    + "by " + trainer + ", where this recipe runs (" + on + "): it computes in bfloat16 or float32",
                    device == Device.CPU ? "remove fp16 (bf16: true gives bfloat16 matmuls on the CPU)"
                            : "use bf16: true on a GPU with bfloat16 (Ampere or later), or remove fp16 to train in "
                                    + "float32 on older GPUs");
        }
        if (backend == Backend.SINGLE && written.regime() != null && written.regime() != PrecisionRegime.FP32) {
            problems.error(problems.at("precision", where), "precision: " + written.regime().key() + " is a regime "
                    + "of the torch worker, and this recipe runs on the single-device trainer (" + on + "), which "
                    + "keeps weights, gradients and optimizer state in fp32", "remove precision (bf16: true gives "
                            + "bfloat16 matmuls over fp32 state here), or use backend: fsdp, whose worker stores each "
                            + "kind of state as the regime says, on CPU ranks too");
        }
    }

    /**
     * Whether the worker computes in bfloat16 rather than float32: every regime but fp32 gathers and computes in
     * bfloat16 (precision.py), on CPU ranks too. The JVM trainer's bf16 autocast is its own ({@code precision}).
     */
    public boolean bfloat16Compute() {
        return backend == Backend.FSDP && precision != PrecisionRegime.FP32;
    }

    /**
     * The devices the plan computes with: the GPUs and their memory, or this machine's RAM shared by the ranks of one
     * node. Asks for the GPU memory when neither the recipe nor the command line gives it.
     */
    public Devices devices() {
        if (device == Device.CPU) {
            return Devices.cpuRanks(perNode, nodes, Devices.thisMachine().capacityPerDevice());
        }
        if (gpuMemory == null) {
            throw new UserError("hardware.gpu_memory", "the plan needs the memory of one GPU",
                    "add gpu_memory: 80GiB under hardware:, or pass --gpu-memory 80GiB");
        }
        return Devices.gpus(perNode, nodes, gpuMemory);
    }

    /** How the model state is spread over the ranks: the worker always shards (FSDP2), offloading where asked. */
    public Sharding sharding(Recipe recipe) {
        if (backend == Backend.SINGLE || worldSize() == 1) {
            return Sharding.SINGLE;
        }
        Recipe.Fsdp fsdp = recipe.distributed().fsdp();
        // the worker offloads only on CUDA: on CPU the parameters already live in host memory
        return fsdp != null && fsdp.offloadParams() && device == Device.CUDA ? Sharding.FSDP_OFFLOAD
                : Sharding.FSDP_FULL_SHARD;
    }

    /** The line {@code validate}, {@code plan} and training print about it. */
    public String describe() {
        return "run: " + summary() + "\n";
    }

    /** Which trainer, on which device, over how many ranks, in a few words. */
    public String summary() {
        String ranks = worldSize() == 1 ? "1 rank" : nodes == 1 ? perNode + " ranks"
                : nodes + " nodes x " + perNode + " ranks = " + worldSize() + " ranks";
        return (backend == Backend.SINGLE ? "single-device trainer (this JVM)" : worldSize() == 1
                ? "torch worker (one process, no torchrun)" : "fsdp worker (torchrun)") + " on "
                + (device == Device.CPU ? "CPU" : "CUDA") + ", " + ranks;
    }
}
