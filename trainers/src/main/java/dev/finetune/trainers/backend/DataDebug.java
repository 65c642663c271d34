package dev.finetune.trainers.backend;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.data.DataOptions;
import dev.finetune.trainers.data.DataPipeline;
import dev.finetune.trainers.data.Example;
import dev.finetune.trainers.data.PreferencePair;
import dev.finetune.trainers.data.RlRows;
import dev.finetune.trainers.data.TokenDebug;
import dev.finetune.trainers.hub.HubModels;
import dev.finetune.trainers.text.Tokenizer;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * {@code preprocess --debug}: the recipe's first examples as the trainer will see them, token by token with the
 * trained tokens marked ({@link TokenDebug}), and the counts over all of them. DPO shows each pair's chosen and
 * rejected sequence; GRPO's prompts carry no labels.
 */
public final class DataDebug {
    private DataDebug() {}

    public static void print(ValidatedRecipe validated, int count, boolean color, PrintWriter out) {
        Recipe recipe = validated.recipe();
        try (Tokenizer tokenizer = Tokenizer.load(HubModels.tokenizer(recipe.model()))) {
            List<Example> examples = new ArrayList<>();
            if (recipe.objective() instanceof Recipe.Objective.Dpo) {
                for (PreferencePair pair : RlRows.preferences(recipe.data().datasets(),
                        DataOptions.of(recipe), tokenizer).train()) {
                    examples.add(labelled(pair.prompt(), pair.chosen()));
                    examples.add(labelled(pair.prompt(), pair.rejected()));
                }
            } else if (recipe.objective() instanceof Recipe.Objective.Sft) {
                examples.addAll(DataPipeline.prepare(recipe.data().datasets(), DataOptions.of(recipe),
                        tokenizer).train());
            } else {
                out.println("debug: GRPO trains on sampled completions; its prompts carry no labels to show");
                return;
            }
            for (int i = 0; i < Math.min(count, examples.size()); i++) {
                out.println("example " + i + (recipe.objective() instanceof Recipe.Objective.Dpo
                        ? (i % 2 == 0 ? " (chosen)" : " (rejected)") : "") + ":");
                out.println(TokenDebug.render(examples.get(i), tokenizer, color));
            }
            out.println("debug: " + TokenDebug.counts(examples) + "; [token(id)] is trained on, token(id) is not");
            out.flush();
        }
    }

    /** A prompt and its answer as one sequence, the answer trained on. */
    private static Example labelled(long[] prompt, long[] answer) {
        int[] ids = new int[prompt.length + answer.length];
        int[] labels = new int[ids.length];
        Arrays.fill(labels, Example.IGNORE);
        for (int i = 0; i < ids.length; i++) {
            ids[i] = Math.toIntExact(i < prompt.length ? prompt[i] : answer[i - prompt.length]);
            labels[i] = i < prompt.length ? Example.IGNORE : ids[i];
        }
        return new Example(ids, labels);
    }
}
