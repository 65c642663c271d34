package dev.finetune.trainers.backend;

import dev.finetune.recipes.UserError;
import dev.finetune.trainers.data.Example;
import dev.finetune.trainers.data.PreparedData;
import dev.finetune.trainers.generation.Completion;
import dev.finetune.trainers.generation.GenerationSettings;
import dev.finetune.trainers.generation.Generator;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.text.Tokenizer;
import java.util.Arrays;
import java.util.List;
import java.util.Set;

/**
 * A short greedy continuation of one fixed prompt, printed before and after training so the change is visible.
 *
 * <p>The prompt comes from the data: the prompt part of the first held-out (else training) example, or, for
 * completion data that has no prompt part, its first few words. Greedy decoding makes before and after comparable.
 */
public record Sample(String prompt, int[] promptIds, int maxNewTokens) {
    private static final int COMPLETION_PROMPT_WORDS = 4;

    /**
     * The sample prompt of {@code data}, or {@code text} when given; with its new tokens within the model's
     * {@code context}, as {@code generate} keeps them (beyond it nothing was trained to attend, and attention over an
     * endless prompt costs memory the plan never counted).
     */
    public static Sample of(PreparedData data, Tokenizer tokenizer, String text, int maxNewTokens, int context) {
        if (text != null) {
            int[] ids = tokenizer.encode(text, true);
            if (ids.length + maxNewTokens > context) {
                throw new UserError("--sample-prompt", "is " + ids.length + " tokens; with the sample's " + maxNewTokens
                        + " new tokens that exceeds the model's context of " + context + " tokens",
                        "shorten it to at most " + Math.max(1, context - maxNewTokens) + " tokens");
            }
            return new Sample(text, ids, maxNewTokens);
        }
        Sample fromData = of(data, tokenizer, maxNewTokens);
        int room = Math.max(1, context - maxNewTokens);
        return fromData.promptIds().length <= room ? fromData : new Sample(fromData.prompt(),
                Arrays.copyOfRange(fromData.promptIds(), fromData.promptIds().length - room,
                        fromData.promptIds().length), maxNewTokens);
    }

    private static Sample of(PreparedData data, Tokenizer tokenizer, int maxNewTokens) {
        List<Example> source = data.eval().isEmpty() ? data.train() : data.eval();
        Example example = source.get(0);
        int firstTarget = 1;
        while (firstTarget < example.length() && example.labels()[firstTarget] == Example.IGNORE) {
            firstTarget++;
        }
        int bos = tokenizer.special().bosId();
        boolean onlyBos = firstTarget == 1 && bos >= 0 && example.inputIds()[0] == bos;
        if (firstTarget > 1 || (firstTarget == 1 && !onlyBos)) {
            int[] ids = Arrays.copyOf(example.inputIds(), firstTarget);
            return new Sample(tokenizer.decode(ids, true), ids, maxNewTokens);
        }
        String[] words = tokenizer.decode(example.inputIds(), true).strip().split("\\s+");
        String prompt = String.join(" ", Arrays.copyOf(words, Math.min(words.length, COMPLETION_PROMPT_WORDS)));
        return new Sample(prompt, tokenizer.encode(prompt, true), maxNewTokens);
    }

    /** The prompt and the model's greedy continuation, as one text; stops at EOS. */
    public String text(LlamaModel model, Tokenizer tokenizer) {
        long[] prompt = Arrays.stream(promptIds).asLongStream().toArray();
        GenerationSettings settings = GenerationSettings.greedy(maxNewTokens);
        int eos = tokenizer.special().eosId();
        if (eos >= 0) {
            settings = settings.withStops(Set.of((long) eos), List.of());
        }
        Completion completion = new Generator(model).generate(List.of(prompt), settings).get(0);
        int[] ids = Arrays.copyOf(promptIds, promptIds.length + completion.tokens().length);
        for (int i = 0; i < completion.tokens().length; i++) {
            ids[promptIds.length + i] = Math.toIntExact(completion.tokens()[i]);
        }
        // Decoded together: a continuation decoded on its own loses the space that joins it to the prompt.
        return tokenizer.decode(ids, true);
    }
}
