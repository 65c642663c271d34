package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ReferenceModel;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters;
import dev.finetune.recipes.model.ModelParameters.Tensor;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * Memory per device, from first principles: bytes per parameter of each kind of state, bytes per token of what
 * autograd keeps, and which of them are alive in each phase. The formulas and their sources are in
 * docs/memory-plan.md; each term's {@code how} prints the numbers it used.
 */
public final class MemoryModel {

    /** CUDA context and library handles, outside PyTorch's allocator counters (docs/memory-plan.md: 0.3–1 GiB). */
    public static final long CUDA_CONTEXT = 512L << 20;
    /** Caching-allocator reserve above live tensors (docs/memory-plan.md: 0.05–2 GiB reserved − allocated). */
    public static final long ALLOCATOR_SLACK = 512L << 20;
    /**
     * Resident set of the JVM with the PyTorch CPU runtime, outside model tensors: 158 MiB right after the engine
     * loads and runs one op (java -XX:+UseSerialGC, DJL 0.36, libtorch 2.7.1); a whole training run adds the C2
     * compiler's code, the tokenizer, the data pipeline's heap and autograd's scratch. Calibrated on the quickstart
     * (stories260K LoRA, where every other term is 77 MiB): peak RSS 451 MiB with the launcher's JVM options. Checked
     * on another shape: a full fine-tune at 16 × 512 tokens peaks at 1639 MiB, this model says 1305 MiB (-20 %).
     * The torch worker on CPU ranks (Python with torch, transformers, PEFT and the gloo group) holds about as much:
     * its resident set once the model is built, less the bytes of its weight and adapter tensors, is 362-368 MiB
     * (Qwen2.5-0.5B-shaped at 4 and 24 layers, one rank; a wide Gemma 2 on each of 2 ranks), so one constant serves
     * both trainers.
     */
    public static final long JVM_AND_LIBTORCH = 384L << 20;
    /**
     * The most the worker copies off a device at once while it writes its rows of the weights (plan.json's
     * {@code output.save_chunk_bytes}; finetune_worker/hf_layout.py), in host memory.
     */
    public static final long SAVE_CHUNK_BYTES = 64L << 20;

    private MemoryModel() {}

    public static MemoryEstimate estimate(TrainingSetup s) {
        return new Estimator(s).run();
    }

    /** NF4 bytes per quantized parameter: 4 bits plus the absmax per block, itself 8-bit with double quantization. */
    public static double nf4BytesPerParam(AdapterSpec.Nf4 nf4) {
        double block = nf4.blockSize();
        return 0.5 + (nf4.doubleQuant() ? 1.0 / block + 4.0 / (block * 256) : 4.0 / block);
    }

    private static final class Estimator {
        private final TrainingSetup s;
        private final ModelConfig c;
        private final ModelParameters p;
        private final PrecisionRegime r;
        private final List<Phase> phases;
        private final List<Term> terms = new ArrayList<>();
        private final AdapterSpec.Lora lora;
        private final AdapterSpec.Nf4 nf4;
        private final int shards;
        private final boolean offload;
        private final long trainable;
        /** The first rank's elements of all parameters and of the trainable ones (FsdpShards); unsharded: all. */
        private final long totalShard;
        private final long trainableShard;
        /** The worker keeps a frozen table tied to the head in rows over the ranks (finetune_worker.vocab_parallel). */
        private final boolean vocabParallel;

        Estimator(TrainingSetup s) {
            this.s = s;
            this.c = s.model();
            this.p = c.parameters();
            this.r = s.precision();
            this.lora = s.adapter() instanceof AdapterSpec.Lora l ? l : null;
            this.nf4 = lora == null ? null : lora.quantization();
            this.shards = s.sharding().shards() ? s.ranks() : 1;
            this.offload = s.sharding() == Sharding.FSDP_OFFLOAD;
            this.trainable = p.trainable(s.adapter());
            this.totalShard = shards > 1 ? FsdpShards.total(p, shards) : p.total();
            this.trainableShard = shards > 1 ? FsdpShards.trainable(p, s.adapter(), shards) : trainable;
            this.vocabParallel = lora != null && nf4 == null && shards > 1 && !offload && p.head() == null
                    && s.kernels().loss() == Kernels.Loss.HEAD_INSIDE_CHUNKED
                    && p.loraTargets(s.adapter()).stream().noneMatch(t -> t.name().endsWith("embed_tokens"));
            List<Phase> ph = new ArrayList<>(List.of(Phase.LOAD, Phase.FORWARD_BACKWARD, Phase.OPTIMIZER_STEP));
            if (s.objective() instanceof Recipe.Objective.Grpo) {
                ph.add(Phase.GENERATION);
            }
            ph.add(Phase.SAVE);
            this.phases = List.copyOf(ph);
        }

        MemoryEstimate run() {
            Set<Phase> all = EnumSet.copyOf(phases);
            Set<Phase> training = EnumSet.copyOf(phases);
            training.remove(Phase.LOAD);
            Set<Phase> backward = EnumSet.of(Phase.FORWARD_BACKWARD, Phase.OPTIMIZER_STEP);

            weights(all);
            if (lora != null) {
                add("adapter", count(trainable) + " LoRA params × " + r.trainableWeight() + " B" + sharded(trainable, trainableShard)
                        + hostNote(), onDevice(trainableShard * r.trainableWeight()), all);
            }
            add("gradients", count(trainable) + " trainable × " + r.gradient() + " B" + sharded(trainable, trainableShard)
                    + (offload ? ", moved to host after reduce-scatter" : ""), onDevice(trainableShard * r.gradient()), backward);
            if (s.sharding() == Sharding.DDP) {
                add("ddp_buckets", "DDP copies gradients into all-reduce buckets: " + count(trainable) + " × " + r.gradient() + " B",
                        trainable * r.gradient(), backward);
            }
            optimizer(training);
            reference(all);
            activations();
            logits();
            if (s.sharding().shards()) {
                fsdpBuffers();
            }
            if (nf4 != null) {
                long largest = p.layer().stream().filter(t -> t.kind() == ModelParameters.Kind.LINEAR)
                        .mapToLong(Tensor::numelPerCopy).max().orElse(0);
                Set<Phase> dequant = EnumSet.of(Phase.FORWARD_BACKWARD);
                if (phases.contains(Phase.GENERATION)) {
                    dequant.add(Phase.GENERATION);
                }
                add("dequant_scratch", "largest NF4 linear dequantized for its matmul: " + count(largest) + " × "
                        + r.activation() + " B", largest * r.activation(), dequant);
            }
            if (s.objective() instanceof Recipe.Objective.Grpo) {
                kvCache();
            }
            staging();
            runtime(all);
            return new MemoryEstimate(s, terms, phases);
        }

        private void weights(Set<Phase> phases) {
            long total = p.total();
            if (lora == null) {
                add("weights", count(total) + " params × " + r.trainableWeight() + " B" + sharded(total, totalShard) + hostNote(),
                        onDevice(totalShard * r.trainableWeight()), phases);
            } else if (nf4 == null) {
                add("weights", count(total) + " frozen params × " + r.frozenWeight() + " B" + sharded(total, totalShard)
                        + hostNote(), onDevice(totalShard * r.frozenWeight()), phases);
            } else {
                long quantized = p.quantizable();
                long plain = total - quantized;
                double perParam = nf4BytesPerParam(nf4);
                add("weights", count(plain) + " unquantized params (embedding, head, norms, biases) × " + r.frozenWeight()
                        + " B" + sharded() + hostNote(), resident(plain * r.frozenWeight()), phases);
                add("weights_nf4", count(quantized) + " decoder linears × " + String.format(Locale.ROOT, "%.4f", perParam)
                        + " B (NF4, block " + nf4.blockSize() + (nf4.doubleQuant() ? ", double-quantized absmax" : ", fp32 absmax")
                        + ")" + sharded() + hostNote(), resident(Math.round(quantized * perParam)), phases);
            }
        }

        private void optimizer(Set<Phase> phases) {
            Optimizer o = s.optimizer();
            long bytes;
            String how;
            if (o.eightBit()) {
                long small = lora == null ? p.inSmallTensors(Optimizer.MIN_8BIT_SIZE) : 0;
                long big = trainable - small;
                bytes = small * o.states() * 4L + Math.round(big * o.states() * (1 + 4.0 / Optimizer.BLOCK));
                how = o.label() + ": " + o.states() + " × (1 B + fp32 absmax per " + Optimizer.BLOCK + ") × " + count(big)
                        + (small > 0 ? " + " + count(small) + " in small tensors × " + o.states() + " × 4 B" : "");
                bytes = resident(bytes);
                how += sharded();
            } else {
                bytes = onDevice(trainableShard * o.states() * r.moment());
                how = o.label() + ": " + o.states() + " state" + (o.states() > 1 ? "s" : "") + " × " + r.moment() + " B × "
                        + count(trainable) + sharded(trainable, trainableShard);
            }
            add("optimizer_state", how + hostNote(), bytes, phases);
        }

        private void reference(Set<Phase> phases) {
            ReferenceModel reference = s.reference();
            if (reference instanceof ReferenceModel.AdapterDisabled) {
                add("reference", "none: the base model with the adapter disabled serves as reference", 0, phases);
            } else if (reference instanceof ReferenceModel.FrozenAdapter) {
                add("reference", "frozen copy of the starting adapter: " + count(trainable) + " × " + r.trainableWeight()
                        + " B" + sharded(trainable, trainableShard) + hostNote(), onDevice(trainableShard * r.trainableWeight()), phases);
            } else if (reference instanceof ReferenceModel.StartingWeights) {
                add("reference", "frozen copy of the policy: " + count(p.total()) + " × " + r.frozenWeight() + " B"
                        + sharded(p.total(), totalShard) + hostNote(), onDevice(totalShard * r.frozenWeight()), phases);
            }
        }

        private void activations() {
            long tokens = (long) s.sequencesPerMicroBatch() * s.trainedSequenceLength();
            int act = r.activation();
            boolean cast = LayerActivations.castsPerAdapter(r);
            long perLayer = LayerActivations.bytesPerToken(c, s.kernels().layers(), act, s.adapter(), cast);
            long allLayers = LayerActivations.allLayers(c, s.kernels().layers(), act, s.adapter(), cast);
            long layers = c.numHiddenLayers();
            long finalNorm = (long) (4 + act) * c.hiddenSize();
            long bytes;
            String how;
            if (s.gradientCheckpointing()) {
                long kept = (long) act * c.hiddenSize();
                bytes = tokens * (layers * kept + perLayer + finalNorm);
                how = "checkpointed: " + layers + " layer inputs × " + kept + " B/token + one layer recomputed at "
                        + perLayer + " B/token (" + s.kernels().layers().label() + "), × " + tokens + " tokens";
            } else {
                bytes = tokens * (allLayers + finalNorm);
                how = (allLayers == layers * perLayer ? perLayer + " B/token/layer (" + s.kernels().layers().label() + ") × " + layers + " layers"
                        : allLayers + " B/token over " + layers + " layers (" + s.kernels().layers().label() + ", up to " + perLayer + " per layer)")
                        + " × " + tokens + " tokens";
            }
            add("activations", how, bytes, EnumSet.of(Phase.FORWARD_BACKWARD));
            if (s.kernels().attention() == Kernels.Attention.SCORES) {
                long length = s.trainedSequenceLength();
                long square = (long) s.sequencesPerMicroBatch() * length * length;
                long keptLayers = s.gradientCheckpointing() ? 1 : layers;
                add("attention_weights", keptLayers + " layer" + (keptLayers == 1 ? "" : "s") + " × "
                        + s.sequencesPerMicroBatch() + " sequences × " + c.numAttentionHeads() + " heads × " + length
                        + "² × " + act + " B, + the fp32 mask " + s.sequencesPerMicroBatch() + " × " + length + "² × 4 B",
                        keptLayers * square * c.numAttentionHeads() * act + square * 4, EnumSet.of(Phase.FORWARD_BACKWARD));
            }
        }

        private void logits() {
            long positions = s.objective() instanceof Recipe.Objective.Grpo g
                    ? (long) s.microBatch() * g.maxCompletionLength()
                    : (long) s.sequencesPerMicroBatch() * s.trainedSequenceLength();
            double perLogit = s.kernels().bytesPerLogit(r.activation());
            String entropy = "";
            long vocab = c.vocabSize();
            if (vocabParallel && s.objective() instanceof Recipe.Objective.Sft) {
                // the one-device chunk of positions (every rank's, gathered) over this rank's rows of the vocabulary
                positions = Math.min(positions * shards, Kernels.headChunkRows(vocab));
                vocab = (vocab + shards - 1) / shards;
            } else if (s.kernels().loss() == Kernels.Loss.HEAD_INSIDE_CHUNKED) {
                positions = Math.min(positions, Kernels.headChunkRows(c.vocabSize()));
                if (s.objective() instanceof Recipe.Objective.Grpo) {
                    // GRPO's entropy metric: the chunk's fp32 probabilities beside its logits
                    perLogit = Math.max(perLogit, 8);
                    entropy = ", with the fp32 probabilities for the entropy";
                }
            }
            long bytes = Math.round(positions * (double) vocab * perLogit);
            add("logits", positions + " positions × " + vocab + " vocab" + (vocab == c.vocabSize() ? ""
                    : " (this rank's rows)") + " × " + String.format(Locale.ROOT, "%.2f", perLogit) + " B ("
                    + s.kernels().loss().label() + entropy + ")", bytes, EnumSet.of(Phase.FORWARD_BACKWARD));
        }

        /**
         * FSDP gathers one unit at a time and prefetches the next: the units are each decoder layer, the embedding and
         * the head, each wrapped on its own (torchtune's {@code custom_sharded_layers}; our worker does the same) so a
         * 128k-vocabulary table is never gathered together with the head (a frozen tied one not at all for SFT:
         * finetune_worker.vocab_parallel). Gradients of the unit just computed are reduce-scattered from a full-size buffer.
         */
        private void fsdpBuffers() {
            double weightBytes = lora == null ? r.trainableWeight() : r.frozenWeight();
            double layerUnit = 0;
            for (Tensor t : p.layer()) {
                boolean quantized = nf4 != null && t.kind() == ModelParameters.Kind.LINEAR;
                layerUnit += t.numel() * (quantized ? nf4BytesPerParam(nf4) : weightBytes);
            }
            long layerTrainable = lora == null ? p.perLayer() : p.loraTrainable(s.adapter()) / c.numHiddenLayers();
            if (lora != null) {
                layerUnit += layerTrainable * r.trainableWeight();
            }
            double tableUnit = Math.max(p.embedding().numel(), p.headParams()) * weightBytes;
            // a frozen tied table in rows over the ranks: the SFT loss never gathers it (the other heads do, per call);
            // the ranks' final hidden states are gathered instead, with their input gradient beside them
            long exchange = 0;
            if (vocabParallel && s.objective() instanceof Recipe.Objective.Sft) {
                tableUnit = 0;
                exchange = 2L * shards * s.sequencesPerMicroBatch() * s.trainedSequenceLength() * c.hiddenSize() * r.activation();
            }
            long tableTrainable = lora == null ? Math.max(p.embedding().numel(), p.headParams()) : 0;
            double largest = Math.max(layerUnit, tableUnit);
            double second = p.head() == null ? layerUnit : Math.min(layerUnit, tableUnit);
            long gather = Math.round(largest + second);
            long reduce = Math.max(layerTrainable, tableTrainable) * r.gradient();
            Map<Phase, Long> bytes = new EnumMap<>(Phase.class);
            // the worker's CPU ranks fill their own shards from the files: nothing is gathered while loading
            bytes.put(Phase.LOAD, s.onCpu() ? 0 : Math.round(largest));
            bytes.put(Phase.FORWARD_BACKWARD, gather + reduce + exchange);
            if (phases.contains(Phase.GENERATION)) {
                bytes.put(Phase.GENERATION, gather);
            }
            // a save gathers nothing: every rank writes its own shards (DCP) and rows (hf_layout.py)
            String table = tableUnit > 0 ? ", embedding/head " + gib(tableUnit) + " GiB" : "; the tied table stays in rows";
            terms.add(new Term("fsdp_buffers", "all-gather of the unit in use and the prefetched one (layer " + gib(layerUnit)
                    + " GiB" + table + ") + reduce-scatter " + gib(reduce) + " GiB" + (exchange > 0 ? " + the ranks' hidden "
                    + "states and their gradient " + gib(exchange) + " GiB" : ""), bytes));
        }

        /** TRL generates the whole generation batch (by default micro × accumulation completions per device) at once. */
        private void kvCache() {
            long sequences = s.generationBatch();
            long length = s.trainedSequenceLength();
            long perToken = 2L * c.numHiddenLayers() * c.numKeyValueHeads() * c.headDim() * r.activation();
            long sampling = sequences * c.vocabSize() * 4L;
            add("kv_cache", sequences + " sequences × " + length + " tokens × " + perToken + " B/token (K and V, "
                    + c.numHiddenLayers() + " layers) + fp32 last-position logits", sequences * length * perToken + sampling,
                    EnumSet.of(Phase.GENERATION));
        }

        /** Load streams the checkpoint tensor by tensor; save writes one tensor at a time. */
        private void staging() {
            int fileBytes = c.torchDtype() != null && c.torchDtype().contains("32") ? 4 : 2;
            if (s.onCpu()) {
                // each rank reads only the rows it owns (finetune_worker.loading.fill)
                add("load_staging", "checkpoint pages mapped while widening to fp32: " + count(p.total()) + " × " + fileBytes + " B"
                        + sharded(), shard(p.total() * fileBytes), EnumSet.of(Phase.LOAD));
            } else {
                add("load_staging", "largest checkpoint tensor: " + count(p.largestTensor()) + " × " + fileBytes + " B",
                        p.largestTensor() * fileBytes, EnumSet.of(Phase.LOAD));
            }
            long largestTrainable = lora == null ? p.largestTensor()
                    : p.loraTargets(s.adapter()).stream().mapToLong(t -> (long) lora.r() * t.copies() * Math.max(t.in(), t.out())).max().orElse(0);
            if (s.sharding() == Sharding.SINGLE && s.onCpu()) {
                add("save_staging", "largest saved tensor in fp32: " + count(largestTrainable) + " × 4 B",
                        largestTrainable * 4, EnumSet.of(Phase.SAVE));
            } else if (s.onCpu()) {
                // the worker's CPU ranks: DCP copies one shard view at a time before it writes it; the weights in
                // Hugging Face's layout are written from the shards' own memory (finetune_worker/hf_layout.py)
                long shard = shard(largestTrainable) * r.trainableWeight();
                add("save_staging", "DCP's copy of the largest shard: " + count(shard(largestTrainable)) + " × "
                        + r.trainableWeight() + " B; nothing gathered", shard, EnumSet.of(Phase.SAVE));
            } else {
                // the worker on GPUs: each rank writes its own rows, at most SAVE_CHUNK_BYTES copied to the host
                // at a time, and DCP stages shards in host memory: nothing more on the device
                add("save_staging", "nothing gathered: each rank writes its own rows via host copies of at most "
                        + (SAVE_CHUNK_BYTES >> 20) + " MiB", 0, EnumSet.of(Phase.SAVE));
            }
        }

        private void runtime(Set<Phase> phases) {
            if (s.onCpu()) {
                add("runtime", "the trainer's process outside tensors: the JVM or Python, and the PyTorch CPU runtime",
                        JVM_AND_LIBTORCH, phases);
            } else {
                add("cuda_context", "CUDA context and library handles, outside PyTorch's counters", CUDA_CONTEXT, phases);
                add("allocator_slack", "caching allocator's reserve above live tensors", ALLOCATOR_SLACK, phases);
            }
        }

        private void add(String name, String how, long bytes, Set<Phase> live) {
            Map<Phase, Long> map = new EnumMap<>(Phase.class);
            for (Phase ph : live) {
                if (phases.contains(ph)) {
                    map.put(ph, bytes);
                }
            }
            terms.add(new Term(name, how, map));
        }

        /** Sharded state on the device: divided by the ranks, nothing when offloaded to the host. */
        private long resident(long bytes) {
            return offload ? 0 : shard(bytes);
        }

        /** The first rank's shards (FsdpShards) on the device, nothing when offloaded to the host. */
        private long onDevice(long bytes) {
            return offload ? 0 : bytes;
        }

        private long shard(long bytes) {
            return (bytes + shards - 1) / shards;
        }

        private String sharded() {
            return shards > 1 ? " / " + shards + " ranks" : "";
        }

        /** " / N ranks", and where some tensor's rows do not divide, that the first rank holds the padded share. */
        private String sharded(long elements, long firstShard) {
            return sharded() + (shards > 1 && firstShard * shards != elements
                    ? " (first rank: " + count(firstShard) + ", each tensor's rows padded to a multiple of " + shards + ")" : "");
        }

        private String hostNote() {
            return offload ? ", in host memory" : "";
        }

        private static String count(long n) {
            return Bytes.count(n);
        }

        private static String gib(double bytes) {
            return String.format(Locale.ROOT, "%.2f", bytes / Bytes.GIB);
        }
    }
}
