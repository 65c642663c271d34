package dev.finetune.trainers.generation;

/**
 * One row's output.
 *
 * @param tokens the generated ids, including the EOS or stop sequence that ended them
 * @param stop why generation ended for this row
 * @param lastPromptLogits raw logits at the last prompt position (what decided the first new token)
 */
public record Completion(long[] tokens, Stop stop, float[] lastPromptLogits) {

    public enum Stop { EOS, STOP_SEQUENCE, MAX_NEW_TOKENS }
}
