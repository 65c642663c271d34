package dev.finetune.recipes.plan;

/**
 * Bytes per parameter for each kind of state, a choice the plan prints because published recipes differ by 2× here
 * (docs/memory-plan.md: precision regimes): the same "bf16 AdamW" run costs 8, 12 or 16 bytes per parameter.
 *
 * @param label printed in the plan
 * @param frozenWeight a frozen base weight (LoRA) that is not quantized
 * @param trainableWeight the working copy of a trainable weight the forward pass reads
 * @param master an extra fp32 master copy of each trainable weight, 0 when there is none
 * @param gradient one gradient value
 * @param moment one optimizer state value (an AdamW moment) at full precision; 8-bit optimizers override it
 * @param activation one saved activation or logit value
 */
public enum PrecisionRegime {
    /** Everything fp32: our CPU trainers (docs/engine-facts.md), and plain PyTorch without autocast. */
    FP32("fp32 weights, gradients and optimizer state", 4, 4, 0, 4, 4, 4),
    /**
     * Our CPU trainer with {@code bf16: true}: fp32 weights, gradients and optimizer state, and during the step a
     * bf16 copy of every weight a matrix multiply reads (kept for backward); activations are counted at fp32, since
     * the residual stream, norms and logits stay fp32 (the bf16 matmul inputs make the real figure lower).
     */
    CPU_BF16_AUTOCAST("bf16 autocast: fp32 weights, gradients and optimizer state + a bf16 copy of each weight during the step",
            6, 6, 0, 4, 4, 4),
    /** torchtune, LitGPT bf16-true, PEFT harness: torch optimizers keep state in the parameter dtype. */
    BF16_PURE("pure bf16: bf16 weights, gradients and optimizer state", 2, 2, 0, 2, 2, 2),
    /** bf16 weights and gradients, optimizer moments upcast to fp32. */
    BF16_FP32_MOMENTS("bf16 weights and gradients, fp32 optimizer moments", 2, 2, 0, 2, 4, 2),
    /** Classic mixed precision (ZeRO paper, HF Trainer AMP, FSDP MixedPrecision): fp32 master weights and moments. */
    MIXED_FP32_MASTER("mixed precision: bf16 weights and gradients, fp32 master weights and moments", 2, 2, 4, 2, 4, 2);

    private final String label;
    private final int frozenWeight;
    private final int trainableWeight;
    private final int master;
    private final int gradient;
    private final int moment;
    private final int activation;

    PrecisionRegime(String label, int frozenWeight, int trainableWeight, int master, int gradient, int moment, int activation) {
        this.label = label;
        this.frozenWeight = frozenWeight;
        this.trainableWeight = trainableWeight;
        this.master = master;
        this.gradient = gradient;
        this.moment = moment;
        this.activation = activation;
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

    public int master() {
        return master;
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
