package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters;
import dev.finetune.recipes.model.ModelParameters.Tensor;
import java.util.Locale;

/**
 * What one optimizer step of the single-device trainer costs on a CPU beyond its matmul FLOPs. On small models that is
 * most of the step (README, "Where a step's time goes": a tiny LoRA step makes 1,652 engine calls from Java and spends
 * a quarter of its time on the attention scores' softmax and mask), so the plan charges two more rates measured on
 * this machine, each times a count of the workload:
 * <ul>
 *   <li><b>calls</b> × the round trip of one engine call on a tiny tensor (JNI, dispatch, allocation). The counts are
 *       the trainer's, taken with {@code bench-train --profile} on the tiny and small shapes: per micro step
 *       {@value #CALLS_PER_STEP} + {@value #CALLS_PER_LAYER} per decoder layer + {@value #CALLS_PER_ADAPTER} per adapted
 *       linear in the forward pass (the backward runs inside the engine), the layers' share once more when
 *       checkpointing recomputes them, and after backward {@value #CALLS_PER_TRAINABLE_TENSOR} per trainable tensor
 *       (AdamW, the clipping norm, zeroing).
 *   <li><b>bytes</b> the memory-bound ops move ÷ the bandwidth of an elementwise op: the {@code B × heads × T × T}
 *       attention scores ({@value #SCORE_PASSES} passes per layer: written by QKᵀ, mask add, softmax, read by PV;
 *       the same in backward; fused attention makes the same passes block by block), what each layer keeps for backward ({@value #ACTIVATION_PASSES} passes: written,
 *       read back, its gradient written), the logits ({@value #LOGIT_PASSES} passes: log-softmax and its backward)
 *       and the optimizer ({@value #OPTIMIZER_BYTES_PER_PARAMETER} B per trainable parameter: AdamW's ops over
 *       weight, gradient and both moments, the norm and the zeroing).
 * </ul>
 * Counts, not fits: no constant here was chosen to make a measured step time come out.
 */
public record CpuOverhead(long calls, double bytes, String how) {

    static final int CALLS_PER_STEP = 80;
    static final int CALLS_PER_LAYER = 62;
    static final int CALLS_PER_ADAPTER = 6;
    static final int CALLS_PER_TRAINABLE_TENSOR = 15;
    static final int SCORE_PASSES = 14;
    static final int ACTIVATION_PASSES = 3;
    static final int LOGIT_PASSES = 5;
    static final int OPTIMIZER_BYTES_PER_PARAMETER = 108;

    /** Per optimizer step on one device; generation (GRPO) is charged by {@link TimeModel} on its own. */
    public static CpuOverhead of(TrainingSetup s) {
        ModelConfig c = s.model();
        ModelParameters p = c.parameters();
        long layers = c.numHiddenLayers();
        long forwardCalls = forwardCalls(s);
        long layerCalls = forwardCalls - CALLS_PER_STEP;
        boolean reference = s.hasReference();
        long perMicro = forwardCalls + (s.gradientCheckpointing() ? layerCalls : 0) + (reference ? forwardCalls : 0);
        long micro = s.gradientAccumulation();
        long tensors = trainableTensors(p, s.adapter());
        long calls = micro * perMicro + CALLS_PER_TRAINABLE_TENSOR * tensors;

        int act = s.precision().activation();
        long sequences = s.sequencesPerMicroBatch();
        long length = s.trainedSequenceLength();
        long tokens = sequences * length;
        // Fused attention keeps no scores in memory, but it still scales, masks, exponentiates and sums each score and
        // recomputes them in backward, one elementwise op at a time on CPU: charged as if they went through memory.
        // (Quickstart: measured 11,600-12,900 tokens/s, planned 10,000-11,100 with this charge and 33,000 without.)
        double scores = (double) SCORE_PASSES * layers * sequences * c.numAttentionHeads() * length * length * act;
        long kept = LayerActivations.allLayers(c, s.kernels().layers(), act, s.adapter(), LayerActivations.castsPerAdapter(s.precision()));
        double activations = (double) ACTIVATION_PASSES * tokens * kept;
        double logits = (double) LOGIT_PASSES * tokens * c.vocabSize() * act;
        // A forward with no backward of its own (checkpointing's recompute, DPO/GRPO's reference) moves about half of
        // what a trained pass moves.
        double forwardOnly = (scores + activations) / 2 * ((s.gradientCheckpointing() ? 1 : 0) + (reference ? 1 : 0))
                + (reference ? logits / 2 : 0);
        double optimizer = (double) OPTIMIZER_BYTES_PER_PARAMETER * p.trainable(s.adapter());
        double bytes = micro * (scores + activations + logits + forwardOnly) + optimizer;
        String how = String.format(Locale.ROOT, "%s engine calls (%d micro step%s × %s + %d trainable tensors × %d) and %.0f MB "
                + "moved by memory-bound ops (attention scores %.0f, layer activations %.0f, logits %.0f, optimizer %.0f MB%s)",
                Bytes.count(calls), micro, micro == 1 ? "" : "s", Bytes.count(perMicro), tensors, CALLS_PER_TRAINABLE_TENSOR,
                bytes / 1e6, micro * scores / 1e6, micro * activations / 1e6, micro * logits / 1e6, optimizer / 1e6,
                forwardOnly > 0 ? ", recomputed/reference forwards " + Math.round(micro * forwardOnly / 1e6) : "");
        return new CpuOverhead(calls, bytes, how);
    }

    /** Engine calls of one forward pass: the fixed part, every decoder layer, every adapted linear. */
    static long forwardCalls(TrainingSetup s) {
        long layers = s.model().numHiddenLayers();
        long adapted = 0;
        for (java.util.Map.Entry<Tensor, Long> e : s.model().parameters().loraTargetLayers(s.adapter()).entrySet()) {
            adapted += e.getValue() * e.getKey().copies();
        }
        return CALLS_PER_STEP + CALLS_PER_LAYER * layers + CALLS_PER_ADAPTER * adapted;
    }

    /** Tensors the optimizer updates: A and B per adapted linear, or every weight of a full fine-tune. */
    static long trainableTensors(ModelParameters p, AdapterSpec adapter) {
        long count = 0;
        if (adapter instanceof AdapterSpec.Lora) {
            for (java.util.Map.Entry<Tensor, Long> e : p.loraTargetLayers(adapter).entrySet()) {
                count += 2L * e.getKey().copies() * e.getValue();
            }
            return count;
        }
        for (ModelParameters.LayerGroup g : p.groups()) {
            count += (long) g.tensors().size() * g.count();
        }
        return count + 1 + (p.finalNorm() != null ? 1 : 0) + (p.head() != null ? 1 : 0);
    }

    /** Seconds of one step at the device's measured call time and bandwidth. */
    public double seconds(ComputeDevice d) {
        return calls * d.secondsPerCall() + (d.bandwidth() > 0 ? bytes / d.bandwidth() : 0);
    }
}
