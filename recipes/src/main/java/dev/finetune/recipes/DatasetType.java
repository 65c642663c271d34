package dev.finetune.recipes;

import java.util.ArrayList;
import java.util.List;

/**
 * The dataset {@code type}s finetune reads, by the name a recipe writes, with the objectives ({@code rl} values,
 * {@code sft} without one) that read each: the one list the recipe reader checks against and the data code
 * switches on. Axolotl's other names are {@link DatasetTypes}' business: recognised, and refused with a reason.
 */
public enum DatasetType {
    ALPACA("alpaca", "sft"),
    CHAT_TEMPLATE("chat_template", "sft", "grpo"),
    COMPLETION("completion", "sft"),
    INPUT_OUTPUT("input_output", "sft"),
    CHAT_TEMPLATE_DEFAULT("chat_template.default", "dpo"),
    CHATML("chatml", "dpo"),
    CHATML_DEFAULT("chatml.default", "dpo"),
    CHATML_INTEL("chatml.intel", "dpo"),
    CHATML_PROMPT_PAIRS("chatml.prompt_pairs", "dpo"),
    LLAMA3("llama3", "dpo"),
    LLAMA3_DEFAULT("llama3.default", "dpo"),
    LLAMA3_INTEL("llama3.intel", "dpo"),
    LLAMA3_PROMPT_PAIRS("llama3.prompt_pairs", "dpo"),
    /** TRL's own rows as they are: prompt/chosen/rejected for DPO, prompt for GRPO. */
    PASSTHROUGH("passthrough", "dpo", "grpo");

    private final String key;
    private final List<String> objectives;

    DatasetType(String key, String... objectives) {
        this.key = key;
        this.objectives = List.of(objectives);
    }

    /** The name as a recipe writes it. */
    public String key() {
        return key;
    }

    /** Whether the objective with this {@code rl} key ({@code sft}, {@code dpo}, {@code grpo}) reads this type. */
    public boolean readBy(String objective) {
        return objectives.contains(objective);
    }

    /** The type a recipe names {@code key}, or null when finetune reads no such type. */
    public static DatasetType named(String key) {
        for (DatasetType t : values()) {
            if (t.key.equals(key)) {
                return t;
            }
        }
        return null;
    }

    /** The names the objective with this {@code rl} key reads, for messages. */
    public static List<String> keysReadBy(String objective) {
        List<String> keys = new ArrayList<>();
        for (DatasetType t : values()) {
            if (t.readBy(objective)) {
                keys.add(t.key);
            }
        }
        return List.copyOf(keys);
    }
}
