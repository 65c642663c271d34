package dev.finetune.recipes;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/** {@code adapter}: what finetune trains besides a full fine-tune (the key absent). */
enum AdapterType {
    LORA,
    /** LoRA over NF4-quantized frozen weights ({@code load_in_4bit: true}). */
    QLORA;

    String key() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The value as a recipe writes it, or {@code null} for another one. */
    static AdapterType of(String key) {
        return Arrays.stream(values()).filter(t -> t.key().equals(key)).findFirst().orElse(null);
    }

    static List<String> keys() {
        return Arrays.stream(values()).map(AdapterType::key).toList();
    }
}
