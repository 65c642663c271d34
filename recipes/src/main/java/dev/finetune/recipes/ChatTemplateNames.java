package dev.finetune.recipes;

import java.util.List;
import java.util.Map;

/**
 * The {@code chat_template} names in one place: Axolotl's, which a recipe may write, and the templates finetune
 * ships (the trainers render them from {@code text/templates/NAME.jinja}, and a test there checks that every name
 * here has its file and every file its name).
 */
public final class ChatTemplateNames {
    /** The model's own template, from its tokenizer_config.json. */
    public static final String TOKENIZER_DEFAULT = "tokenizer_default";
    /** {@code tokenizer_default_fallback_NAME}: the model's own template, else the shipped NAME. */
    public static final String FALLBACK_PREFIX = "tokenizer_default_fallback_";
    /** The template text (or file) in {@code chat_template_jinja}. */
    public static final String JINJA = "jinja";

    /** Templates finetune ships, by Axolotl's names; ours are written for this project and render the same formats. */
    public static final List<String> SHIPPED = List.of("alpaca", "chatml", "gemma", "gemma3", "llama2", "llama3",
            "mistral_v1", "mistral_v2v3", "mistral_v3_tekken", "mistral_v7_tekken", "phi_3", "phi_35", "qwen_25", "qwen3");
    /** Short names the brief and users reach for; each is one of {@link #SHIPPED}. */
    public static final Map<String, String> ALIASES = Map.of("qwen", "qwen_25", "mistral", "mistral_v1");

    /** The values of Axolotl's {@code chat_template} key (its schema's enum): what the top-level key accepts. */
    static final List<String> AXOLOTL = List.of("alpaca", "chatml", "mistral_v1", "mistral_v2v3",
            "mistral_v3_tekken", "mistral_v7_tekken", "gemma", "cohere", "llama3", "llama3_2_vision", "llama4", "phi_3",
            "phi_35", "deepseek_v2", "deepseek_v3", "jamba", JINJA, "qwen_25", "qwen3", "qwen3_5", "falcon_h1",
            "nemotron_h", TOKENIZER_DEFAULT, "exaone", "exaone4", "metharme", "pixtral", "llava", "qwen2_vl", "gemma3",
            "gemma3n", "gemma4", "gemma4_unified", "command_a", "command_a_tool_use", "command_a_rag", "aya");

    private ChatTemplateNames() {}

    /**
     * Whether the trainers can render the template a {@code chat_template} names: the model's own, a text of the
     * recipe's, a template finetune ships (by name or alias), or the model's own falling back to one it ships.
     */
    public static boolean renderable(String name) {
        String template = name.startsWith(FALLBACK_PREFIX) ? name.substring(FALLBACK_PREFIX.length()) : name;
        return name.equals(TOKENIZER_DEFAULT) || name.equals(JINJA) || SHIPPED.contains(template)
                || ALIASES.containsKey(template);
    }

    /**
     * The error for a {@code chat_template} that is a name of Axolotl's but not one finetune ships: validate says it,
     * where the run would only find it while rendering the first conversation.
     */
    static void refuseUnshipped(String name, Object where, Problems problems) {
        if (name != null && !renderable(name)) {
            problems.invalid.add("chat_template");
            problems.error(where, "chat_template " + name + " is unsupported: finetune ships " + String.join(", ", SHIPPED)
                    + " (and the model's own, tokenizer_default)", "use one of those, or give the template's text in "
                    + "chat_template_jinja (chat_template: jinja)");
        }
    }
}
