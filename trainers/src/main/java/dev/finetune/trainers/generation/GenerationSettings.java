package dev.finetune.trainers.generation;

import dev.finetune.recipes.UserError;
import java.util.List;
import java.util.Set;

/**
 * How to continue prompts.
 *
 * @param maxNewTokens tokens to generate per row at most
 * @param temperature 0 means greedy (argmax, lowest id on ties); otherwise logits are divided by it and sampled
 * @param topK keep only the k most likely tokens before sampling; 0 keeps all
 * @param topP keep the smallest set of most likely tokens whose mass reaches p; 1 keeps all
 * @param seed the sampling stream; the same seed, prompts and settings give the same tokens
 * @param eosIds a row stops after emitting one of these
 * @param stopSequences a row stops after its output ends with one of these token sequences
 * @param minP keep only tokens at least this share of the likeliest token's probability; 0 keeps all
 * @param repetitionPenalty divides the positive (multiplies the negative) logits of tokens already in the row,
 *     prompt included, before any other filter (as transformers does); 1 is off
 */
public record GenerationSettings(int maxNewTokens, float temperature, int topK, float topP, long seed, Set<Long> eosIds,
        List<long[]> stopSequences, float minP, float repetitionPenalty) {

    public GenerationSettings(int maxNewTokens, float temperature, int topK, float topP, long seed, Set<Long> eosIds,
            List<long[]> stopSequences) {
        this(maxNewTokens, temperature, topK, topP, seed, eosIds, stopSequences, 0f, 1f);
    }

    public GenerationSettings {
        if (maxNewTokens < 1) {
            throw new UserError("max_new_tokens", "must be at least 1, got " + maxNewTokens, "ask for one or more tokens");
        }
        if (!(temperature >= 0) || Float.isInfinite(temperature)) {
            throw new UserError("temperature", "must be 0 (greedy) or positive, got " + temperature, "typical values are 0.6 to 1.0");
        }
        if (topK < 0) {
            throw new UserError("top_k", "must be 0 (off) or positive, got " + topK, "typical values are 20 to 50");
        }
        if (!(topP > 0 && topP <= 1)) {
            throw new UserError("top_p", "must be in (0, 1], got " + topP, "1 turns it off; typical values are 0.8 to 0.95");
        }
        if (!(minP >= 0 && minP <= 1)) {
            throw new UserError("min_p", "must be in [0, 1], got " + minP, "0 turns it off; typical values are 0.05 to 0.1");
        }
        if (!(repetitionPenalty > 0) || Float.isInfinite(repetitionPenalty)) {
            throw new UserError("repetition_penalty", "must be positive, got " + repetitionPenalty,
                    "1 turns it off; typical values are 1.05 to 1.2");
        }
        eosIds = Set.copyOf(eosIds);
        stopSequences = List.copyOf(stopSequences);
    }

    /** Argmax decoding of exactly {@code maxNewTokens} tokens, no stop condition. */
    public static GenerationSettings greedy(int maxNewTokens) {
        return new GenerationSettings(maxNewTokens, 0f, 0, 1f, 0L, Set.of(), List.of());
    }

    public boolean greedy() {
        return temperature == 0f;
    }

    public GenerationSettings withStops(Set<Long> eos, List<long[]> sequences) {
        return new GenerationSettings(maxNewTokens, temperature, topK, topP, seed, eos, sequences, minP,
                repetitionPenalty);
    }
}
