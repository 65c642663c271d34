package dev.finetune.recipes;

import dev.finetune.recipes.Recipe.Flag;
import dev.finetune.recipes.plan.Accelerator;
import dev.finetune.recipes.plan.PrecisionRegime;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Where and how the recipe runs: precision flags, {@code hardware:}, FSDP and other parallelism keys, {@code backend:}.
 */
final class ParallelismSection {
    private final Problems problems;
    private final Path recipeDir;

    ParallelismSection(Problems problems, Path recipeDir) {
        this.problems = problems;
        this.recipeDir = recipeDir;
    }

    Recipe.Precision precision(KeyReader top) {
        Flag bf16 = top.flag("bf16");
        // Axolotl reads bfloat16 as bf16 (dtype and mixed precision both: "bf16 or bfloat16")
        if (top.bool("bfloat16") && bf16 != Flag.TRUE) {
            if (bf16 == Flag.FALSE) {
                problems.warn(top.at("bfloat16"), "bfloat16: true turns bfloat16 on although bf16 is false (as in Axolotl)",
                        "keep only bf16: true, or remove bfloat16");
            }
            bf16 = Flag.TRUE;
        }
        Flag fp16 = top.flag("fp16");
        Flag tf32 = top.flag("tf32");
        if (bf16 == Flag.TRUE && fp16 == Flag.TRUE) {
            problems.error(top.at("fp16"), "bf16 and fp16 are both true: a run computes in one of them",
                    "keep bf16: true and remove fp16 (or the other way round on GPUs without bfloat16)");
        }
        String named = top.choice("precision", "auto", java.util.stream.Stream.concat(java.util.stream.Stream.of("auto"),
                PrecisionRegime.keys().stream()).toList());
        PrecisionRegime regime = PrecisionRegime.byKey(named);
        if (regime == PrecisionRegime.FP32 && (bf16 == Flag.TRUE || fp16 == Flag.TRUE)) {
            problems.error(top.at("precision"), "precision: fp32 contradicts " + (bf16 == Flag.TRUE ? "bf16" : "fp16")
                    + ": true", "keep one of them");
        } else if (regime != null && regime != PrecisionRegime.FP32 && (bf16 == Flag.FALSE || fp16 == Flag.TRUE)) {
            problems.error(top.at("precision"), "precision: " + named + " computes in bfloat16, but "
                    + (fp16 == Flag.TRUE ? "fp16: true" : "bf16: false") + " says otherwise", "remove one of them");
        }
        return new Recipe.Precision(bf16, fp16, tf32, regime);
    }

    Recipe.Hardware hardware(KeyReader top) {
        YamlNode n = top.node("hardware");
        if (n == null) {
            return new Recipe.Hardware.Unspecified();
        }
        if (n instanceof Scalar s && "cpu".equals(s.value())) {
            return new Recipe.Hardware.Cpu();
        }
        if (!(n instanceof Mapping m)) {
            problems.error(n.where(), "hardware must be 'cpu' or a mapping {gpus, nodes, gpu_memory}, got " + YamlNode.describe(n),
                    "write e.g. 'hardware: {gpus: 8, gpu_memory: 80GiB}' or 'hardware: cpu'");
            return new Recipe.Hardware.Unspecified();
        }
        KeyReader h = new KeyReader(m, "hardware.", problems);
        boolean cpu = h.bool("cpu");
        boolean gpusWritten = h.has("gpus");
        int gpus = h.integerIn("gpus", 1, Recipe.Hardware.MAX_GPUS_PER_NODE);
        int nodes = h.integerIn("nodes", 1, Recipe.Hardware.MAX_NODES);
        String memory = h.string("gpu_memory", null);
        String gpu = h.string("gpu_type", null);
        Double tflops = h.number("gpu_tflops", null, Double.MIN_VALUE, 1e6);
        Double utilization = h.number("utilization", null, Double.MIN_VALUE, 1);
        Double cost = h.number("cost_per_gpu_hour", null, 0, 1e6);
        h.finish();
        Accelerator accelerator = null;
        if (gpu != null) {
            accelerator = Accelerator.lookup(gpu).orElse(null);
            if (accelerator == null) {
                String close = Suggestions.closest(gpu.toUpperCase(java.util.Locale.ROOT), Accelerator.names());
                problems.error(h.at("gpu_type"), "hardware.gpu_type '" + gpu + "' is not in the plan's device table",
                        (close != null ? "did you mean '" + close + "'? " : "") + "known: " + String.join(", ", Accelerator.names())
                                + "; or give its dense peak as hardware.gpu_tflops");
            }
        }
        Long bytes = null;
        if (memory != null) {
            try {
                bytes = dev.finetune.recipes.plan.MemorySize.parse(memory, h.at("gpu_memory").label());
            } catch (UserError e) {
                problems.error(e.where(), "hardware.gpu_memory: " + e.getMessage(), e.hint());
            }
        } else if (accelerator != null) {
            bytes = Math.round(accelerator.memoryGib() * (1L << 30));
        }
        if (cpu) {
            if (gpusWritten) {
                problems.error(h.at("gpus"), "hardware sets both cpu: true and gpus", "keep one of them");
            }
            for (String gpuOnly : List.of("gpu_type", "gpu_tflops", "cost_per_gpu_hour")) {
                if (h.has(gpuOnly)) {
                    problems.error(h.at(gpuOnly), "hardware." + gpuOnly + " describes a GPU, but hardware sets cpu: true",
                            "remove it (on CPU the plan measures this machine's matrix-multiply rate)");
                }
            }
            return new Recipe.Hardware.Cpu(new Recipe.Hardware.Throughput(null, null, utilization, null));
        }
        return new Recipe.Hardware.Gpus(gpus, nodes, bytes,
                new Recipe.Hardware.Throughput(accelerator != null ? accelerator.name() : null, tflops, utilization, cost));
    }

    /** {@code dp_shard_size} as written, for the check against the hardware. */
    private Integer shardSize;

    Recipe.Distributed distributed(KeyReader top, Recipe.Training training, AdapterSpec adapter,
                                           Recipe.Objective objective) {
        List<String> fsdpList = top.strings("fsdp", true);
        Integer topVersion = top.integer("fsdp_version", null, 1);
        Mapping config = top.mapping("fsdp_config");
        int cp = top.integer("context_parallel_size", 1);
        int tp = top.integer("tensor_parallel_size", 1);
        int ddpTimeout = top.integer("ddp_timeout", 1);
        this.shardSize = top.integer("dp_shard_size", null, 1);
        Integer replicate = top.integer("dp_replicate_size", null, 1);
        if (cp > 1) {
            problems.error(top.at("context_parallel_size"), "context_parallel_size > 1 is unsupported",
                    "remove it (sequences stay on one device; use gradient_checkpointing for long contexts)");
        }
        if (tp > 1) {
            problems.error(top.at("tensor_parallel_size"), "tensor_parallel_size > 1 is unsupported",
                    "shard with fsdp_version: 2 instead");
        }
        if (replicate != null && replicate > 1) {
            problems.error(top.at("dp_replicate_size"), "dp_replicate_size > 1 (HSDP) is unsupported", "remove it: FSDP2 shards over all GPUs");
        }
        if (topVersion != null && topVersion > 2) {
            problems.error(top.at("fsdp_version"), "fsdp_version must be 1 or 2, got " + topVersion, "use fsdp_version: 2");
        }
        boolean on = config != null || (fsdpList != null && !fsdpList.isEmpty());
        if (!on) {
            if (topVersion != null) {
                problems.warn(top.at("fsdp_version"), "fsdp_version has no effect without fsdp_config", "add fsdp_config: or remove fsdp_version");
            }
            return new Recipe.Distributed(null, cp, tp, ddpTimeout);
        }
        KeyReader f = new KeyReader(config == null ? new Mapping(Map.of(), top.at("fsdp")) : config, "fsdp_config.", problems);
        if (config != null) {
            List<String> prefixed = new ArrayList<>();
            YamlNode.Where first = null;
            for (String k : List.copyOf(config.entries().keySet())) {
                if (k.startsWith("fsdp_") && !k.equals("fsdp_version")) {
                    YamlNode.Where at = f.renamed(k, k.substring("fsdp_".length()));
                    if (at != null) {
                        first = first == null ? at : first;
                        prefixed.add(k);
                    }
                }
            }
            // one warning for the lot: Axolotl's older examples prefix every key
            if (!prefixed.isEmpty()) {
                problems.warn(first, "the fsdp_ prefix inside fsdp_config is deprecated (" + prefixed.size()
                        + (prefixed.size() == 1 ? " key: " : " keys: ") + String.join(", ", prefixed) + ")",
                        "drop the prefix: " + String.join(", ", prefixed.stream().map(k -> k.substring("fsdp_".length())).toList()));
            }
        }
        Integer innerVersion = f.integer("fsdp_version", null, 1);
        Integer innerVersion2 = f.integer("version", null, 1);
        int version = topVersion != null ? topVersion : innerVersion != null ? innerVersion : innerVersion2 != null ? innerVersion2 : 1;
        for (String key : List.of("fsdp_version", "version")) {
            Integer inner = key.equals("version") ? innerVersion2 : innerVersion;
            if (inner != null && (inner > 2 || inner != version)) {
                problems.error(f.at(key), "fsdp_config." + key + " " + inner + (inner > 2 ? " is not an FSDP version"
                        : " disagrees with fsdp_version " + version), "keep one fsdp_version: 2");
            }
        }
        boolean offload = f.bool("offload_params");
        boolean reshard = f.bool("reshard_after_forward");
        boolean activationCheckpointing = f.bool("activation_checkpointing");
        boolean ramEfficient = f.bool("cpu_ram_efficient_loading");
        String stateDict = f.choice("state_dict_type", null, List.of("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"));
        String wrap = f.choice("auto_wrap_policy", null, List.of("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP"));
        String cls = f.string("transformer_layer_cls_to_wrap", null);
        f.bool("sync_module_states", null);
        f.bool("use_orig_params", null);
        f.finish();
        if (version == 1) {
            problems.warn(fsdpList != null ? top.at("fsdp") : top.at("fsdp_config"),
                    "FSDP1 is deprecated (in Axolotl too); finetune runs it as FSDP2", "add fsdp_version: 2");
        }
        // which optimizers the worker runs is RunChecks' to say, with the other refusals of the backend
        return new Recipe.Distributed(new Recipe.Fsdp(version, offload, reshard, activationCheckpointing, ramEfficient,
                stateDict, wrap, cls), cp, tp, ddpTimeout);
    }

    Recipe.Backend backend(KeyReader top, Recipe.Hardware hardware, Recipe.Distributed distributed,
            Recipe.Training training) {
        // FSDP2 shards over every rank: a smaller shard group would mean replicas (HSDP), which is refused above
        if (shardSize != null && hardware instanceof Recipe.Hardware.Gpus && shardSize != hardware.devices()) {
            problems.error(top.at("dp_shard_size"), "dp_shard_size " + shardSize + " with " + hardware.devices()
                    + " GPUs would leave replicas (HSDP), which is unsupported", "remove dp_shard_size: FSDP2 shards "
                    + "over all " + hardware.devices() + " GPUs");
        }
        Recipe.Backend backend = top.choice("backend", Recipe.Backend.class);
        if (backend == Recipe.Backend.SINGLE && hardware.devices() > 1) {
            problems.error(top.at("backend"), "backend: single runs on one device, but hardware has " + hardware.devices() + " GPUs",
                    "use backend: fsdp (or auto), or hardware: {gpus: 1}");
        }
        if (backend == Recipe.Backend.SINGLE && distributed.sharded()) {
            problems.error(top.at("backend"), "backend: single cannot shard, but fsdp_config is set",
                    "use backend: fsdp, or remove fsdp_config");
        }
        // backend: fsdp with hardware: cpu is allowed: the ranks run as CPU processes over gloo (--nproc-per-node).
        return backend;
    }

    /**
     * {@code torch_compile*}, {@code liger_*} and {@code activation_offloading}. The two Liger losses are read and
     * need nothing: the worker always applies the LM head inside its loss, one chunk of rows at a time.
     */
    Recipe.Speedups speedups(KeyReader top, Recipe.Training training, Recipe.Distributed distributed) {
        Flag compile = top.flag("torch_compile", Flag.FALSE);
        String backend = top.string("torch_compile_backend", null);
        String mode = top.choice("torch_compile_mode", null, List.of("default", "reduce-overhead", "max-autotune",
                "max-autotune-no-cudagraphs"));
        List<String> liger = new java.util.ArrayList<>();
        for (String key : new java.util.TreeSet<>(Recipe.Speedups.LIGER_KERNELS.keySet())) {
            String kernel = Recipe.Speedups.LIGER_KERNELS.get(key);
            if (Boolean.TRUE.equals(top.bool(key, null)) && !liger.contains(kernel)) {
                liger.add(kernel);
            }
        }
        top.bool("liger_cross_entropy", null);
        top.bool("liger_fused_linear_cross_entropy", null);
        boolean offload = false;
        YamlNode n = top.node("activation_offloading");
        if (n instanceof Scalar s && (Boolean.TRUE.equals(s.value()) || "legacy".equals(s.value()))) {
            offload = true;
        } else if (n instanceof Scalar s && "disk".equals(s.value())) {
            problems.error(n.where(), "activation_offloading: disk is unsupported",
                    "use activation_offloading: true (pinned CPU memory)");
        } else if (n != null && !(n instanceof Scalar s && Boolean.FALSE.equals(s.value()))) {
            problems.error(n.where(), "activation_offloading must be true, false or legacy, got " + YamlNode.describe(n),
                    "write e.g. 'activation_offloading: true'");
        }
        boolean checkpointing = training.gradientCheckpointing()
                || (distributed.fsdp() != null && distributed.fsdp().activationCheckpointing());
        if (offload && !checkpointing) {
            problems.error(top.at("activation_offloading"), "activation_offloading moves the checkpointed layer inputs "
                    + "to CPU memory, and gradient_checkpointing is off", "add gradient_checkpointing: true");
        }
        return new Recipe.Speedups(compile, backend, mode, liger, offload);
    }
}
