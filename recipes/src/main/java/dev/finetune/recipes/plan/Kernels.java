package dev.finetune.recipes.plan;

/**
 * Which implementation computes the decoder layers and the loss. The same model saves different tensors for backward
 * under eager PyTorch and under a compiled or fused graph, and the loss can hold several full copies of the logits or
 * one chunk (docs/memory-plan.md: activations, logits).
 */
public record Kernels(Layers layers, Loss loss, Attention attention) {

    /** Fused attention, as every published measurement we compare with used. */
    public Kernels(Layers layers, Loss loss) {
        this(layers, loss, Attention.FUSED);
    }

    /** Whether the attention weights of every layer exist as a {@code [B, heads, T, T]} tensor, and which scores are computed. */
    public enum Attention {
        /**
         * SDPA / FlashAttention: only a log-sum-exp per head and token is kept (counted in the per-token bytes), and
         * the blocks above the causal diagonal are skipped.
         */
        FUSED("fused attention"),
        /**
         * Fused attention given an additive mask (packing, padding: the single-device trainer), so it keeps what
         * {@link #FUSED} keeps but computes every score.
         */
        FUSED_MASKED("fused attention, every score computed"),
        /**
         * Composed from matmul, mask and softmax (the single-device trainer's op-by-op layers, a debugging switch):
         * autograd keeps each layer's softmax output, {@code B × heads × T × T}, and the additive mask
         * {@code B × T × T} in fp32 is shared by all layers.
         */
        SCORES("attention weights kept");

        private final String label;

        Attention(String label) {
            this.label = label;
        }

        public String label() {
            return label;
        }
    }

    /** What autograd keeps per decoder layer. */
    public enum Layers {
        /** HF-style eager modules: RMSNorm keeps its fp32-upcast input, SwiGLU keeps gate, up, silu(gate), product. */
        EAGER("eager layers"),
        /** torch.compile / fused kernels: norms keep a 16-bit input, SwiGLU keeps gate and up only. */
        FUSED("fused/compiled layers");

        private final String label;

        Layers(String label) {
            this.label = label;
        }

        public String label() {
            return label;
        }
    }

    /** How the cross-entropy over the vocabulary is computed. */
    public enum Loss {
        /** Logits in the activation dtype, fp32 log-softmax inside the loss, logits gradient: 8 B/logit in bf16. */
        FULL("full cross-entropy"),
        /** The model returns {@code logits.float()} (older HF versions): an fp32 copy stays alive next to the rest. */
        UPCAST_FP32("cross-entropy on fp32-upcast logits"),
        /**
         * torchtune-style chunked loss over 8 chunks. Compiled (with {@link Layers#FUSED}): the 16-bit chunks and a
         * per-row log-sum-exp are kept, the fp32 work stays inside one fused kernel per chunk. Eager: each chunk's fp32
         * log-softmax is kept.
         */
        CHUNKED("chunked cross-entropy"),
        /**
         * The single-device trainer's one pass over the logits ({@code TokenScores}): the fp32 logits, then the loss's
         * gradient factor written into their storage, and in backward the logits' gradient: 8 B/logit.
         */
        IN_PLACE("one pass over fp32 logits, gradient factor in place"),
        /**
         * {@link #IN_PLACE} with the LM head inside it (DPO's and GRPO's log-probabilities, float32 through a plain
         * head): the head's gradients come from the factor kept in the graph, so no logits gradient follows:
         * 4 B/logit.
         */
        HEAD_INSIDE("one pass over fp32 logits with the LM head inside, no logits gradient"),
        /**
         * The SFT loss with the LM head inside, over chunks of {@link #HEAD_CHUNK_LOGITS} logits: only one chunk
         * exists at a time, whatever the number of positions.
         */
        HEAD_INSIDE_CHUNKED("the LM head inside the loss, one chunk of logits at a time");

        private final String label;

        Loss(String label) {
            this.label = label;
        }

        public String label() {
            return label;
        }
    }

    /** What our own trainers run: eager layers (DJL or the torch worker without compile) and a full loss. */
    public static Kernels ours() {
        return new Kernels(Layers.EAGER, Loss.FULL);
    }

    /**
     * The single-device DJL trainer: each layer one compiled module of eager ops with torch's fused attention (told
     * the mask, so computing every score, unless no row is packed or padded), and the loss in one pass over the
     * logits ({@code loss}: {@link RecipeSetup} picks it from the objective, the precision and the head).
     */
    public static Kernels singleDevice(Loss loss) {
        return new Kernels(Layers.EAGER, loss, Attention.FUSED_MASKED);
    }

    /**
     * How many float32 logits {@link Loss#HEAD_INSIDE_CHUNKED} makes at a time (256 MiB). Each chunk's two GEMMs
     * read the whole head matrix again: with 8 Mi-logit chunks a {@code medium} LoRA step (32,000 vocabulary, 2,048
     * positions: 8 chunks) took 4,113 against 4,040 CPU ms (medians of 3, within the noise) for 130 MB less peak.
     * So chunks bound what a large vocabulary or a long batch would hold (128k × 2,048 positions: 1 GiB, 4
     * chunks) and leave smaller ones whole.
     */
    public static final long HEAD_CHUNK_LOGITS = 64L << 20;

    /** The positions in one chunk of {@link Loss#HEAD_INSIDE_CHUNKED} for this vocabulary. */
    public static long headChunkRows(long vocabSize) {
        return Math.max(1, HEAD_CHUNK_LOGITS / vocabSize);
    }

    /** Chunks of a chunked cross-entropy (torchtune's default). */
    static final int LOSS_CHUNKS = 8;

    /**
     * Bytes per logit while the loss and its gradient exist (docs/memory-plan.md: logits and loss). The chunked loss
     * differs by who runs it:
     * torchtune deletes its list of logit chunks before backward, so eagerly only each chunk's fp32 log-softmax
     * survives (4 B), while torch.compile's partitioner saves the cheapest inputs, the 16-bit chunk and a per-row
     * log-sum-exp, and recomputes the fp32 upcast and softmax inside the fused backward kernel, which writes a 16-bit
     * gradient for one chunk at a time.
     */
    public double bytesPerLogit(int act) {
        return switch (loss) {
            // logits, fp32 log-softmax kept for backward, logits gradient
            case FULL -> act + 4 + act;
            // + the fp32 copy the model returns, and its fp32 gradient
            case UPCAST_FP32 -> act == 4 ? 12 : act + 4 + 4 + 4 + act;
            // the logits are float32 whatever the matmuls ran in
            case IN_PLACE -> 4 + 4;
            case HEAD_INSIDE -> 4;
            // the fp32 chunk, and with 16-bit compute the head's 16-bit product beside it (before the upcast) or
            // the chunk's gradient factor cast back for the 16-bit matmuls (finetune_worker.head_loss)
            case HEAD_INSIDE_CHUNKED -> act == 4 ? 4 : 4 + act;
            case CHUNKED -> layers == Layers.FUSED
                    ? act + (double) act / LOSS_CHUNKS
                    : 4 + (4.0 + act) / LOSS_CHUNKS;
        };
    }
}
