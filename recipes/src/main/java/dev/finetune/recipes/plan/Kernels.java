package dev.finetune.recipes.plan;

/**
 * Which implementation computes the decoder layers and the loss. The same model saves different tensors for backward
 * under eager PyTorch and under a compiled or fused graph, and the loss can hold several full copies of the logits or
 * one chunk (research/memory-anchors.md §2.4–2.5).
 */
public record Kernels(Layers layers, Loss loss) {

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
        /** torchtune-style chunked loss: 16-bit logit chunks kept, fp32 work on one of 8 chunks at a time. */
        CHUNKED("chunked cross-entropy");

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
}
