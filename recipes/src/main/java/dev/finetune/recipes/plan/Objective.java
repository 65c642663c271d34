package dev.finetune.recipes.plan;

/** What one training example costs in sequences, and whether a reference model or generation is involved. */
public sealed interface Objective {

    String label();

    /** Supervised fine-tuning: one sequence per example. */
    record Sft() implements Objective {
        public String label() {
            return "SFT";
        }
    }

    /** DPO: a chosen and a rejected sequence per example, and a reference policy. */
    record Dpo() implements Objective {
        public String label() {
            return "DPO";
        }
    }

    /**
     * GRPO: {@code numGenerations} sampled completions per prompt, scored, then trained on.
     *
     * @param beta KL weight; 0 means no reference policy is evaluated at all
     * @param generationBatch completions generated together per device; 0 for TRL's default, micro × accumulation
     */
    record Grpo(int numGenerations, int maxPromptLength, int maxCompletionLength, double beta, int generationBatch)
            implements Objective {
        public String label() {
            return "GRPO (" + numGenerations + " generations, prompt ≤ " + maxPromptLength + ", completion ≤ "
                    + maxCompletionLength + ")";
        }
    }
}
