package dev.finetune.adapters.peft;

import java.util.Optional;

/**
 * Tensor names as PEFT writes them in {@code adapter_model.safetensors}: the model wrapped twice
 * ({@code base_model.model.}), the layer's Hugging Face name, then {@code lora_A.weight} or {@code lora_B.weight}
 * with the adapter name ("default") left out.
 */
public final class PeftNames {
    public static final String PREFIX = "base_model.model.";
    public static final String LORA_A = ".lora_A.weight";
    public static final String LORA_B = ".lora_B.weight";

    private PeftNames() {}

    public static String loraA(String module) {
        return PREFIX + module + LORA_A;
    }

    public static String loraB(String module) {
        return PREFIX + module + LORA_B;
    }

    /** The layer name inside a LoRA tensor name, or empty when the name is not one. */
    public static Optional<String> moduleOf(String tensorName) {
        if (!tensorName.startsWith(PREFIX)) {
            return Optional.empty();
        }
        for (String suffix : new String[] {LORA_A, LORA_B}) {
            if (tensorName.endsWith(suffix)) {
                return Optional.of(tensorName.substring(PREFIX.length(), tensorName.length() - suffix.length()));
            }
        }
        return Optional.empty();
    }
}
