package dev.finetune.recipes;

import java.util.List;

/**
 * How the model's weights are trained: all of them, or a low-rank adapter over frozen (optionally 4-bit) weights.
 * Parsed from {@code adapter}, {@code lora_*} and {@code load_in_4bit}/{@code bnb_4bit_*} keys.
 */
public sealed interface AdapterSpec {

    /** Every parameter trainable ({@code adapter} absent). */
    record Full() implements AdapterSpec {}

    /**
     * LoRA ({@code adapter: lora}) or QLoRA ({@code adapter: qlora}, base weights stored as NF4).
     *
     * @param targetModules {@code lora_target_modules}: short module names ({@code q_proj}) or regexes
     * @param targetAllLinear {@code lora_target_linear: true}: every linear layer except the output head
     * @param useRslora scale by {@code alpha/sqrt(r)} instead of {@code alpha/r}
     * @param quantization {@code null} for plain LoRA
     */
    record Lora(
            int r,
            double alpha,
            double dropout,
            List<String> targetModules,
            boolean targetAllLinear,
            boolean useRslora,
            Nf4 quantization) implements AdapterSpec {

        public boolean quantized() {
            return quantization != null;
        }

        public double scaling() {
            return useRslora ? alpha / Math.sqrt(r) : alpha / r;
        }
    }

    /** NF4 storage of the frozen base weights: absmax per {@code blockSize} values, optionally double-quantized absmax. */
    record Nf4(int blockSize, boolean doubleQuant) {}
}
