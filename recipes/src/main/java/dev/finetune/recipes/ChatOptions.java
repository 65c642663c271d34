package dev.finetune.recipes;

import java.util.List;
import java.util.Map;

/**
 * How a conversation dataset's messages become the turns a chat template renders and the tokens that carry loss,
 * with Axolotl's per-dataset keys and meanings ({@code chat_template} rows for SFT; the role map for the
 * {@code chat_template.default} preference rows too).
 *
 * @param roles {@code roles}: the dataset's role name → the template's role ({@code {assistant: [gpt, model]}} is
 *     written target → sources); empty keeps Axolotl's defaults (human → user, gpt → assistant)
 * @param trainOnEot {@code train_on_eot}: which end-of-turn tokens ({@code eot_tokens}) carry loss, {@code null} to
 *     follow {@code train_on_eos} as Axolotl does
 * @param chatTemplateJinja {@code chat_template_jinja} of this dataset (text or file), or {@code null}
 * @param dropSystemMessage {@code drop_system_message}: a leading system turn is left out
 * @param fieldSystem {@code field_system}: the row field whose text becomes the system turn when the messages have none
 * @param fieldTools {@code field_tools}: the row field holding tool definitions, given to the template as {@code tools}
 * @param fieldThinking {@code field_thinking}: the message field holding the reasoning trace
 * @param templateThinkingKey {@code template_thinking_key}: the name the template reads the reasoning under
 * @param splitThinking {@code split_thinking}: an assistant message's {@code <think>…</think>} (and Axolotl's other
 *     pairs) is moved out of its content into {@code templateThinkingKey}
 * @param messageFieldTraining {@code message_field_training}: the message field whose true/false decides whether that
 *     turn is trained, overriding {@code roles_to_train}; {@code null} when not written
 * @param messageFieldTrainingDetail {@code message_field_training_detail}: the message field listing character spans
 *     of the content ({@code begin_offset}, {@code end_offset} inclusive, {@code train}); {@code null} when not written
 */
public record ChatOptions(
        Map<String, String> roles,
        TrainOnEos trainOnEot,
        String chatTemplateJinja,
        boolean dropSystemMessage,
        String fieldSystem,
        String fieldTools,
        String fieldThinking,
        String templateThinkingKey,
        boolean splitThinking,
        String messageFieldTraining,
        String messageFieldTrainingDetail) {

    /** Axolotl's defaults: what a dataset that writes none of these keys gets. */
    public static final ChatOptions DEFAULTS = new ChatOptions(Map.of(), null, null, false, "system", "tools",
            "reasoning_content", "reasoning_content", false, null, null);

    /** Axolotl's role names for ShareGPT-style data, used when {@code roles} is not written. */
    public static final Map<String, String> DEFAULT_ROLES = Map.of("human", "user", "gpt", "assistant");

    /**
     * The reasoning delimiters {@code split_thinking} recognises (Axolotl's): the first pair found in an assistant's
     * content is moved out of it.
     */
    public static final List<List<String>> THINKING_PAIRS = List.of(List.of("<think>", "</think>"),
            List.of("<reasoning>", "</reasoning>"), List.of("<|begin_of_thought|>", "<|end_of_thought|>"));

    /** The role the template sees for a role the dataset writes. */
    public String role(String written) {
        if (roles.isEmpty()) {
            return DEFAULT_ROLES.getOrDefault(written, written);
        }
        return roles.getOrDefault(written, written);
    }
}
