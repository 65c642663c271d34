package dev.finetune.recipes.plan;

/**
 * Bytes per parameter for each kind of state, a choice the plan prints because published recipes differ by 2× here
 * (docs/memory-plan.md: precision regimes): the same "bf16 AdamW" run costs 8, 12 or 16 bytes per parameter.
 *
 * <p>Every regime but the CPU trainer's autocast is one the torch worker runs exactly as counted here
 * (trainers/src/main/python/finetune_worker/precision.py), so its tensors after the first step equal these terms.
 *
 * @param key how a recipe ({@code precision:}), {@code finetune plan --precision} and the worker name it
 * @param label printed in the plan
 * @param frozenWeight a frozen base weight (LoRA) that is not quantized
 * @param trainableWeight a trainable weight as stored: the copy the optimizer updates (under {@link #MIXED_FP32_MASTER}
 *     the fp32 master; its bf16 copy exists only while FSDP2 gathers a unit, a term of its own)
 * @param gradient one gradient value
 * @param moment one optimizer state value (an AdamW moment) at full precision; 8-bit optimizers override it
 * @param activation one saved activation or logit value
 */
public enum PrecisionRegime {
    /** Everything fp32: our CPU trainers (docs/engine-facts.md), and plain PyTorch without autocast. */
    FP32("fp32", "fp32 weights, gradients and optimizer state", 4, 4, 4, 4, 4),
    /**
     * Our CPU trainer with {@code bf16: true}: fp32 weights, gradients and optimizer state, and during the step a
     * bf16 copy of every weight a matrix multiply reads (kept for backward); activations are counted at fp32, since
     * the residual stream, norms and logits stay fp32 (the bf16 matmul inputs make the real figure lower).
     */
    CPU_BF16_AUTOCAST("cpu-bf16-autocast",
            "bf16 autocast: fp32 weights, gradients and optimizer state + a bf16 copy of each weight during the step",
            6, 6, 4, 4, 4),
    /**
     * A model loaded in bf16 and trained so (Axolotl's and the HF Trainer's {@code bf16: true} on a full fine-tune,
     * torchtune, LitGPT bf16-true): torch optimizers keep state in the parameter dtype.
     */
    BF16_PURE("bf16", "pure bf16: bf16 weights, gradients and optimizer state", 2, 2, 2, 2, 2),
    /** bf16 weights and gradients, optimizer moments kept in fp32. */
    BF16_FP32_MOMENTS("bf16-fp32-moments", "bf16 weights and gradients, fp32 optimizer moments", 2, 2, 2, 4, 2),
    /**
     * bf16 compute over fp32 master weights (FSDP2's {@code MixedPrecisionPolicy}, HF Trainer AMP, PEFT's fp32
     * adapters on a bf16 base): trainable weights, gradients and moments fp32, frozen weights bf16, each unit gathered
     * as bf16 for its matmuls. The same 16 bytes per trained parameter as the ZeRO paper's 2 + 2 + 12.
     */
    MIXED_FP32_MASTER("mixed", "mixed precision: bf16 compute, fp32 master weights, gradients and moments", 2, 4, 4, 4, 2);

    private final String key;
    private final String label;
    private final int frozenWeight;
    private final int trainableWeight;
    private final int gradient;
    private final int moment;
    private final int activation;

    PrecisionRegime(String key, String label, int frozenWeight, int trainableWeight, int gradient, int moment, int activation) {
        this.key = key;
        this.label = label;
        this.frozenWeight = frozenWeight;
        this.trainableWeight = trainableWeight;
        this.gradient = gradient;
        this.moment = moment;
        this.activation = activation;
    }

    public String key() {
        return key;
    }

    /** The regime a recipe or {@code --precision} names ({@code bf16-pure} is the plan's older spelling), or null. */
    public static PrecisionRegime byKey(String key) {
        for (PrecisionRegime r : values()) {
            if (r.key.equals(key) && r != CPU_BF16_AUTOCAST) {
                return r;
            }
        }
        return "bf16-pure".equals(key) ? BF16_PURE : null;
    }

    /** The keys a recipe may name: every regime the worker runs. */
    public static java.util.List<String> keys() {
        return java.util.Arrays.stream(values()).filter(r -> r != CPU_BF16_AUTOCAST).map(PrecisionRegime::key).toList();
    }

    public String label() {
        return label;
    }

    public int frozenWeight() {
        return frozenWeight;
    }

    public int trainableWeight() {
        return trainableWeight;
    }

    public int gradient() {
        return gradient;
    }

    public int moment() {
        return moment;
    }

    public int activation() {
        return activation;
    }
}
