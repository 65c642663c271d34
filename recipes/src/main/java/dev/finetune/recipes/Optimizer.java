package dev.finetune.recipes;

/**
 * The optimizers we run, by Axolotl/HF name, with what each keeps per trainable parameter (the plan's optimizer
 * state term): AdamW two moments, each of {@code stateBits} bits; SGD none (the HF Trainer's {@code sgd} is
 * {@code torch.optim.SGD} without momentum, as no recipe key gives it one). A catalogue of its own
 * (not nested in {@link Recipe}): the memory plan, the worker's requirements and the benches consult it without a
 * recipe at hand.
 */
public enum Optimizer {
    ADAMW_TORCH("adamw_torch", 2, 32, false),
    ADAMW_TORCH_FUSED("adamw_torch_fused", 2, 32, false),
    ADAMW_HF("adamw_hf", 2, 32, false),
    ADAMW_TORCH_8BIT("adamw_torch_8bit", 2, 8, false),
    ADAMW_TORCH_4BIT("adamw_torch_4bit", 2, 4, false),
    ADAMW_BNB_8BIT("adamw_bnb_8bit", 2, 8, false),
    ADAMW_8BIT("adamw_8bit", 2, 8, false),
    PAGED_ADAMW_8BIT("paged_adamw_8bit", 2, 8, true),
    PAGED_ADAMW_32BIT("paged_adamw_32bit", 2, 32, true),
    SGD("sgd", 0, 32, false);

    /** bitsandbytes' {@code min_8bit_size}: smaller tensors keep fp32 state. */
    public static final long MIN_8BIT_SIZE = 4096;
    /** Values per fp32 absmax in blockwise 8-bit state. */
    public static final long BLOCK = 2048;

    private final String axolotlName;
    private final int states;
    private final int stateBits;
    private final boolean paged;

    Optimizer(String axolotlName, int states, int stateBits, boolean paged) {
        this.axolotlName = axolotlName;
        this.states = states;
        this.stateBits = stateBits;
        this.paged = paged;
    }

    public String axolotlName() {
        return axolotlName;
    }

    /** Values of state kept per trainable parameter: AdamW's two moments, none for SGD. */
    public int states() {
        return states;
    }

    /** What the state costs per parameter when stored at its own precision (8 for fp32 AdamW). */
    public int stateBytesPerParam() {
        return states * stateBits / 8;
    }

    public boolean paged() {
        return paged;
    }

    /**
     * Moments stored in 8 bits, blockwise with an fp32 absmax per {@link #BLOCK} values (bitsandbytes, torchao);
     * tensors under {@link #MIN_8BIT_SIZE} elements keep 32-bit state.
     */
    public boolean eightBit() {
        return stateBits == 8;
    }

    /** How the plan names the state it counts; the 4-bit variant is counted at the regime's moment precision. */
    public String label() {
        return eightBit() ? "8-bit AdamW" : this == SGD ? "SGD" : "AdamW";
    }

    /** bitsandbytes' 8-bit AdamW, which FSDP2 cannot shard. */
    public boolean bitsAndBytes() {
        return this == ADAMW_BNB_8BIT || this == ADAMW_8BIT || this == PAGED_ADAMW_8BIT || this == PAGED_ADAMW_32BIT;
    }

    public static Optimizer byName(String name) {
        for (Optimizer o : values()) {
            if (o.axolotlName.equals(name)) {
                return o;
            }
        }
        return null;
    }
}
