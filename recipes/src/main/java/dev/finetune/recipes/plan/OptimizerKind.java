package dev.finetune.recipes.plan;

/** What the optimizer keeps per trainable parameter. */
public enum OptimizerKind {
    /** AdamW (torch, fused or not; paged 32-bit variants too): two moments at the regime's moment precision. */
    ADAMW("AdamW", 2, false),
    /**
     * bitsandbytes / torchao 8-bit AdamW: two moments of 1 byte plus one fp32 absmax per 2048-value block; tensors
     * under 4096 elements keep 32-bit state ({@code min_8bit_size}).
     */
    ADAMW_8BIT("8-bit AdamW", 2, true),
    /** SGD with momentum: one state. */
    SGD("SGD with momentum", 1, false);

    /** bitsandbytes' {@code min_8bit_size}: smaller tensors keep fp32 state. */
    public static final long MIN_8BIT_SIZE = 4096;
    /** Values per fp32 absmax in blockwise 8-bit state. */
    public static final long BLOCK = 2048;

    private final String label;
    private final int states;
    private final boolean eightBit;

    OptimizerKind(String label, int states, boolean eightBit) {
        this.label = label;
        this.states = states;
        this.eightBit = eightBit;
    }

    public String label() {
        return label;
    }

    public int states() {
        return states;
    }

    public boolean eightBit() {
        return eightBit;
    }
}
