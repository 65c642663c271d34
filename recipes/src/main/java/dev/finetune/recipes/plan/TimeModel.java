package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.model.ModelParameters;
import dev.finetune.recipes.model.ModelParameters.Tensor;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Wall time of a run from a FLOPs model of one trained token and the device's effective rate.
 *
 * <p>Per token of sequence length {@code s}, with {@code N} the parameters that take part in a matmul (decoder
 * linears, MoE experts counted {@code k/E}, and the output head, also when tied) and {@code A = 2·L·h_q·s} the
 * attention's QKᵀ and AV (causal: a token attends {@code s/2} keys on average, two matmuls of 2 FLOPs per
 * multiply-add; eager attention that computes every score and masks them afterwards does {@code 2A}):
 * <ul>
 *   <li>forward {@code 2N + A}; a full fine-tune's backward computes input and weight gradients, {@code 4N + 2A}:
 *       {@code 6N + 3A} in all;
 *   <li>LoRA's frozen weights need no weight gradient, so the backward is {@code 2N + 2A}: {@code 4N + 3A}, plus the
 *       adapters' {@code 3·2r(in+out)} per adapted linear;
 *   <li>gradient checkpointing runs each decoder layer's forward once more;
 *   <li>DPO and GRPO with a reference add one forward without gradients per token ({@code 2N + A});
 *   <li>GRPO also generates its completions: prefill and decoding at one forward per token, but a decoding step
 *       reads every weight once, so it takes at least the weight bytes over the memory bandwidth.
 * </ul>
 * On a CPU the single-device trainer's engine calls and memory-bound ops are added per step ({@link CpuOverhead}):
 * on small models they, not the FLOPs, set the step time. GRPO's decoding there costs one forward pass's calls per
 * generated token. NF4 dequantization, data loading, evaluation, checkpoints and (for FSDP) communication are not
 * counted.
 */
public final class TimeModel {

    private TimeModel() {}

    /** FLOPs of one trained token, with the arithmetic that produced them. */
    public record Flops(double perToken, double forward, String formula) {}

    /**
     * The estimate of a run.
     *
     * @param tokensPerStep trained tokens of one optimizer step over all devices
     * @param secondsPerStep one optimizer step, generation included
     * @param totalSteps {@code null} when unknown before the data is read
     * @param costPerGpuHour {@code null} when the recipe gives none
     * @param overhead the CPU trainer's calls and memory traffic per step, {@code null} on a GPU
     */
    public record Estimate(TrainingSetup setup, ComputeDevice device, Flops flops, long tokensPerStep, double secondsPerStep,
            double generationSecondsPerStep, Long totalSteps, Double costPerGpuHour, CpuOverhead overhead) {

        /** Seconds of each step spent on the overhead, 0 on a GPU. */
        public double overheadSecondsPerStep() {
            return overhead == null ? 0 : overhead.seconds(device);
        }

        public int devices() {
            return setup.ranks();
        }

        /** Trained tokens per second, per device. */
        public double tokensPerSecondPerDevice() {
            return tokensPerStep / secondsPerStep / devices();
        }

        public Double totalTokens() {
            return totalSteps == null ? null : (double) totalSteps * tokensPerStep;
        }

        public Double totalSeconds() {
            return totalSteps == null ? null : totalSteps * secondsPerStep;
        }

        /** {@code null} without a total or a price. */
        public Double cost() {
            Double seconds = totalSeconds();
            return seconds == null || costPerGpuHour == null ? null : seconds / 3600 * devices() * costPerGpuHour;
        }

        /** The lines {@code plan} prints. */
        public String describe() {
            StringBuilder out = new StringBuilder();
            out.append("time       ").append(si(flops.perToken())).append("FLOP per trained token = ").append(flops.formula()).append('\n');
            out.append("           ").append(device.label()).append(" × ").append(percent(device.utilization()))
                    .append(" utilisation = ").append(si(device.effectiveFlops())).append("FLOPS → ")
                    .append(count(tokensPerSecondPerDevice())).append(" tokens/s per device × ").append(devices())
                    .append(devices() == 1 ? " device" : " devices").append('\n');
            if (overhead != null) {
                out.append("           including per step ").append(seconds(overheadSecondsPerStep())).append(" of ")
                        .append(seconds(secondsPerStep)).append(": ").append(overhead.how()).append(" at ")
                        .append(String.format(Locale.ROOT, "%.1f µs per call and %.1f GB/s", device.secondsPerCall() * 1e6,
                                device.bandwidth() / 1e9)).append('\n');
            }
            if (generationSecondsPerStep > 0) {
                out.append("           GRPO generation: ").append(seconds(generationSecondsPerStep)).append(" of each step's ")
                        .append(seconds(secondsPerStep)).append('\n');
            }
            if (totalSteps == null) {
                out.append("           ").append(seconds(secondsPerStep)).append(" per optimizer step (").append(count(tokensPerStep))
                        .append(" tokens); total steps unknown until the data is read (set max_steps to fix it)\n");
            } else {
                out.append("           ").append(count(totalTokens())).append(" tokens (").append(totalSteps).append(" steps × ")
                        .append(count(tokensPerStep)).append(") → ").append(duration(totalSeconds())).append(" wall");
                Double cost = cost();
                if (cost != null) {
                    out.append(String.format(Locale.ROOT, "; %s at %s per GPU-hour × %d GPU%s", money(cost), money(costPerGpuHour),
                            devices(), devices() == 1 ? "" : "s"));
                }
                out.append('\n');
            }
            return out.toString();
        }
    }

    /** FLOPs per trained token of a setup (the class comment states the model). */
    public static Flops flops(TrainingSetup s) {
        ModelConfig c = s.model();
        ModelParameters p = c.parameters();
        double decoder = 0;
        double routedShare = 1;
        for (ModelParameters.LayerGroup g : p.groups()) {
            for (Tensor t : g.tensors()) {
                if (t.adaptable()) {
                    decoder += g.count() * (t.kind() == ModelParameters.Kind.EXPERTS ? t.numel() * g.routedShare() : t.numel());
                }
            }
            routedShare = Math.min(routedShare, g.routedShare());
        }
        double head = (double) c.hiddenSize() * c.vocabSize();
        long hq = (long) c.numAttentionHeads() * c.headDim();
        boolean everyScore = s.kernels().attention() != Kernels.Attention.FUSED;
        double attention = attentionFlops(c, hq, s.trainedSequenceLength(), everyScore);
        double adapters = 0;
        if (s.adapter() instanceof AdapterSpec.Lora lora) {
            for (java.util.Map.Entry<Tensor, Long> e : p.loraTargetLayers(s.adapter()).entrySet()) {
                Tensor t = e.getKey();
                double perCopy = 2.0 * lora.r() * (t.in() + t.out());
                double copies = t.kind() == ModelParameters.Kind.EXPERTS ? t.copies() * routedShare : 1;
                adapters += e.getValue() * perCopy * copies;
            }
        }
        double n = decoder + head;
        double forward = 2 * n + attention + adapters;
        boolean lora = s.adapter() instanceof AdapterSpec.Lora;
        List<String> terms = new ArrayList<>();
        double total;
        if (lora) {
            total = 4 * n + 3 * attention + 3 * adapters;
            terms.add("4 × " + count(n) + " matmul params (forward + input gradients; frozen weights need no weight gradient)");
        } else {
            total = 6 * n + 3 * attention;
            terms.add("6 × " + count(n) + " matmul params");
        }
        terms.add("3 × " + si(attention) + "FLOP attention (2·L·h_q·s" + (everyScore ? " × 2, every score computed"
                : c.slidingWindow() != null ? ", sliding-window layers over " + c.slidingWindow().size() + " keys" : "") + ")");
        if (lora) {
            terms.add("3 × " + si(adapters) + "FLOP adapters");
        }
        if (s.gradientCheckpointing()) {
            double recompute = 2 * decoder + attention + (lora ? adapters : 0);
            total += recompute;
            terms.add(si(recompute) + "FLOP recomputed layers (checkpointing)");
        }
        boolean reference = s.hasReference();
        if (reference) {
            double ref = 2 * n + attention;
            total += ref;
            terms.add(si(ref) + "FLOP reference forward");
        }
        return new Flops(total, forward - adapters, String.join(" + ", terms));
    }

    /**
     * QKᵀ and AV of one token, summed over the layers: {@code 4·h_q} FLOPs per key attended. A fused kernel visits the
     * keys a token attends, {@code s/2} on average with a causal mask and fewer within a sliding window (it
     * skips the blocks outside, as FlashAttention's and SDPA's windowed kernels do); masked attention computes all
     * {@code s}.
     */
    static double attentionFlops(ModelConfig c, long hq, long s, boolean everyScore) {
        if (everyScore) {
            return 4.0 * c.numHiddenLayers() * hq * s;
        }
        double full = s / 2.0;
        double keys = 0;
        for (int layer = 0; layer < c.numHiddenLayers(); layer++) {
            if (c.slidingWindow() != null && c.slidingWindow().slides(layer) && c.slidingWindow().size() < s) {
                long w = c.slidingWindow().size();
                // positions below w attend t + 1 keys, the rest w
                keys += ((double) w * (w + 1) / 2 + (double) (s - w) * w) / s;
            } else {
                keys += full;
            }
        }
        return 4.0 * hq * keys;
    }

    /**
     * @param totalSteps optimizer steps of the run, {@code null} when unknown
     * @param costPerGpuHour price of one GPU for an hour, {@code null} when not given
     */
    public static Estimate estimate(TrainingSetup s, ComputeDevice device, Long totalSteps, Double costPerGpuHour) {
        Flops flops = flops(s);
        long perDevice = (long) s.sequencesPerMicroBatch() * s.trainedSequenceLength() * s.gradientAccumulation();
        double seconds = perDevice * flops.perToken() / device.effectiveFlops();
        CpuOverhead overhead = device.secondsPerCall() > 0 ? CpuOverhead.of(s) : null;
        if (overhead != null) {
            seconds += overhead.seconds(device);
        }
        double generation = 0;
        if (s.objective() instanceof Recipe.Objective.Grpo g) {
            long sequences = s.generationBatch();
            double compute = sequences * (double) s.trainedSequenceLength() * flops.forward()
                    / device.effectiveFlops();
            double weightBytes = (double) s.model().parameters().total() * s.precision().frozenWeight() / (s.sharding().shards() ? s.ranks() : 1);
            double reads = device.bandwidth() > 0 ? g.maxCompletionLength() * weightBytes / device.bandwidth() : 0;
            double calls = overhead == null ? 0
                    : g.maxCompletionLength() * (double) CpuOverhead.forwardCalls(s) * device.secondsPerCall();
            generation = Math.max(compute, reads) + calls;
            seconds += generation;
        }
        return new Estimate(s, device, flops, perDevice * s.ranks(), seconds, generation, totalSteps, costPerGpuHour, overhead);
    }

    static String count(double n) {
        return Bytes.count(Math.round(n));
    }

    /** Three significant digits and an SI prefix, with its trailing space: "31.9 G", "396 T", "1.62 M". */
    static String si(double v) {
        String[] prefixes = {"", "k", "M", "G", "T", "P"};
        int i = 0;
        while (i < prefixes.length - 1 && Math.abs(v) >= 999.5) {
            v /= 1000;
            i++;
        }
        return String.format(Locale.ROOT, v >= 99.95 ? "%.0f %s" : v >= 9.995 ? "%.1f %s" : "%.2f %s", v, prefixes[i]);
    }

    static String percent(double share) {
        return String.format(Locale.ROOT, "%.0f %%", 100 * share);
    }

    static String seconds(double s) {
        return String.format(Locale.ROOT, s >= 10 ? "%.0f s" : "%.2f s", s);
    }

    /** 45 s, 12 min, 3 h 20 min, 2 d 4 h. */
    public static String duration(double seconds) {
        long s = Math.round(seconds);
        if (s < 60) {
            return s + " s";
        }
        long m = Math.round(seconds / 60);
        if (m < 60) {
            return m + " min";
        }
        if (m < 48 * 60) {
            return m / 60 + " h " + m % 60 + " min";
        }
        long h = Math.round(seconds / 3600);
        return h / 24 + " d " + h % 24 + " h";
    }

    static String money(double v) {
        return String.format(Locale.ROOT, v >= 100 ? "$%,.0f" : "$%.2f", v);
    }
}
