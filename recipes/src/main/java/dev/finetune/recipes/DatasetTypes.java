package dev.finetune.recipes;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Dataset {@code type} names: the ones we train ({@link DatasetType}), Axolotl's others (recognised, unsupported),
 * and everything else (unknown). Axolotl only discovers a bad type while tokenizing, minutes into a run; we say so up front.
 */
final class DatasetTypes {

    enum Kind { SUPPORTED, UNSUPPORTED, UNKNOWN }

    /** @param type what a supported name reads as; null otherwise */
    record Verdict(Kind kind, String detail, String hint, DatasetType type) {
        Verdict(Kind kind, String detail, String hint) {
            this(kind, detail, hint, null);
        }

        static Verdict supported(DatasetType type) {
            return new Verdict(Kind.SUPPORTED, "", "", type);
        }
    }

    static final List<String> SFT = DatasetType.keysReadBy("sft");
    static final List<String> DPO = DatasetType.keysReadBy("dpo");
    /** GRPO prompts: TRL's prompt-only rows ({@code prompt} text or messages), or chat messages. */
    static final List<String> GRPO = DatasetType.keysReadBy("grpo");
    static final Set<String> AXOLOTL_SFT_OTHER = Set.of("jeopardy", "oasst", "gpteacher", "reflection",
            "explainchoice", "concisechoice", "summarizetldr", "pretrain", "metharme", "alpaca_chat",
            "alpaca_chat.load_qa", "alpaca_chat.load_concise", "alpaca_chat.load_camel_ai",
            "alpaca_w_system.load_open_orca", "context_qa", "context_qa.load_v2", "context_qa.load_404",
            "creative_acr.load_answer", "creative_acr.load_critique", "creative_acr.load_revise", "messages",
            "user_defined", "bradley_terry.chat_template", "stepwise_supervised", "_synthetic", "orpo.chat_template",
            "chat_template.argilla");
    static final Set<String> AXOLOTL_DPO_OTHER = Set.of("chatml.icr", "llama3.icr", "chatml.ultra", "llama3.ultra",
            "chatml.argilla_chat", "llama3.argilla_chat", "chat_template.argilla_chat", "zephyr.nectar");

    private DatasetTypes() {}

    static Verdict check(String type, Recipe.Objective objective) {
        boolean dpo = objective instanceof Recipe.Objective.Dpo;
        boolean grpo = objective instanceof Recipe.Objective.Grpo;
        if (type.startsWith("sharegpt")) {
            return new Verdict(Kind.UNSUPPORTED, "Axolotl removed the sharegpt formats", "use type: chat_template "
                    + "with message_property_mappings: {role: from, content: value}");
        }
        if (dpo) {
            if (DPO.contains(type)) {
                return Verdict.supported(DatasetType.named(type));
            }
            if (AXOLOTL_DPO_OTHER.contains(type)) {
                return new Verdict(Kind.UNSUPPORTED, "finetune reads " + String.join(", ", DPO), "convert the pairs "
                        + "to prompt/chosen/rejected fields and use type: chatml.prompt_pairs");
            }
            if (type.equals("chatml.argilla") || type.equals("llama3.argilla")) {
                return new Verdict(Kind.UNKNOWN, " for rl: dpo (Axolotl's docs list it, but only its KTO strategies "
                        + "have it, so Axolotl fails while loading)", "did you mean '" + type + "_chat'?");
            }
            if (SFT.contains(type) || AXOLOTL_SFT_OTHER.contains(type)) {
                return new Verdict(Kind.UNKNOWN, " for rl: dpo: it is a supervised format, not preference pairs",
                        "use a preference type such as chat_template.default or chatml.prompt_pairs");
            }
            return unknown(type, DPO);
        }
        if (grpo) {
            if (GRPO.contains(type)) {
                return Verdict.supported(DatasetType.named(type));
            }
            if (type.contains(".")) {
                return new Verdict(Kind.UNSUPPORTED, "GRPO prompt transforms written in Python are not run",
                        "store prompts as a prompt field (text or chat messages) and use type: passthrough");
            }
            if (SFT.contains(type) || AXOLOTL_SFT_OTHER.contains(type)) {
                return new Verdict(Kind.UNSUPPORTED, "GRPO reads prompts only: " + String.join(", ", GRPO),
                        "store each prompt in a prompt field (text or chat messages) and use type: passthrough");
            }
            return unknown(type, GRPO);
        }
        if (SFT.contains(type)) {
            return Verdict.supported(DatasetType.named(type));
        }
        if (type.equals("alpaca:alpaca")) {
            // Axolotl's module:function spelling of its alpaca strategy
            return Verdict.supported(DatasetType.ALPACA);
        }
        if (AXOLOTL_SFT_OTHER.contains(type) || type.matches("[a-z_]+:[a-z_]+")
                && (SFT.contains(type.substring(0, type.indexOf(':'))) || AXOLOTL_SFT_OTHER.contains(type.substring(0, type.indexOf(':'))))) {
            return new Verdict(Kind.UNSUPPORTED, "finetune reads " + String.join(", ", SFT),
                    "convert the data to alpaca fields (instruction, input, output) or chat messages");
        }
        if (DPO.contains(type) || AXOLOTL_DPO_OTHER.contains(type)) {
            return new Verdict(Kind.UNKNOWN, " without rl: it is a preference-pair format", "add rl: dpo, or use type: "
                    + "chat_template for supervised data");
        }
        return unknown(type, SFT);
    }

    private static Verdict unknown(String type, List<String> ours) {
        List<String> all = new ArrayList<>(ours);
        all.addAll(AXOLOTL_SFT_OTHER);
        all.addAll(AXOLOTL_DPO_OTHER);
        String close = Suggestions.closest(type, all);
        return new Verdict(Kind.UNKNOWN, "", close != null ? "did you mean '" + close + "'?"
                : "use one of " + String.join(", ", ours));
    }
}
