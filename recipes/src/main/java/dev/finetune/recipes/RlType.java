package dev.finetune.recipes;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/** Axolotl's {@code rl} values: the objectives finetune trains, the deprecated alias, and the ones it refuses. */
enum RlType {
    DPO(true),
    GRPO(true),
    /** Axolotl's deprecated spelling of DPO with the IPO loss. */
    IPO(true),
    KTO(false),
    ORPO(false),
    SIMPO(false),
    GDPO(false),
    EBFT(false);

    private final boolean trained;

    RlType(boolean trained) {
        this.trained = trained;
    }

    /** Whether finetune trains it (IPO as DPO with {@code dpo_loss_type: [ipo]}). */
    boolean trained() {
        return trained;
    }

    String key() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The value as a recipe writes it, or {@code null} for one Axolotl does not know. */
    static RlType of(String key) {
        return Arrays.stream(values()).filter(t -> t.key().equals(key)).findFirst().orElse(null);
    }

    static List<String> keys() {
        return Arrays.stream(values()).map(RlType::key).toList();
    }
}
