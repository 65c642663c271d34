package dev.finetune.trainers.backend;

import ai.djl.ndarray.NDManager;
import com.google.gson.JsonObject;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.data.DataOptions;
import dev.finetune.trainers.data.GrpoPrompt;
import dev.finetune.trainers.data.RlRows;
import dev.finetune.trainers.generation.Completion;
import dev.finetune.trainers.generation.GenerationSettings;
import dev.finetune.trainers.generation.Generator;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.rewards.RewardInput;
import dev.finetune.trainers.rewards.Rewards;
import dev.finetune.trainers.hub.HubModels;
import dev.finetune.trainers.text.Tokenizer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * {@code finetune rewards RECIPE --dry-run}: the recipe's reward functions applied to the first rows of its dataset,
 * so a broken reward shows up before any compute is spent. The completions scored are the ones the user gives, or
 * else a few sampled from the base model exactly as GRPO would sample them.
 */
public final class RewardDryRun {
    private RewardDryRun() {}

    public record Scored(String completion, double total, Map<String, Double> byFunction) {}

    public record Row(String prompt, JsonObject fields, List<Scored> completions) {}

    /**
     * @param given completions to score for every row; empty: sample {@code samples} per row from the base model
     * @param allowCommands the user passed {@code --allow-commands}
     */
    public static List<Row> run(Recipe recipe, int rows, List<String> given, int samples, boolean allowCommands,
            long seed) {
        if (!(recipe.objective() instanceof Recipe.Objective.Grpo grpo)) {
            throw new UserError("rl", "reward functions belong to rl: grpo recipes", "add rl: grpo and trl.reward_funcs");
        }
        Path modelDir = HubModels.base(recipe.model());
        try (Tokenizer tokenizer = Tokenizer.load(HubModels.tokenizer(recipe.model()));
                Rewards rewards = Rewards.start(grpo.rewardFuncs(), grpo.rewardWeights(), allowCommands)) {
            DataOptions options = DataOptions.of(recipe).withValSetSize(0);
            List<GrpoPrompt> prompts = RlRows.prompts(recipe.data().datasets(), options, tokenizer).train();
            prompts = prompts.subList(0, Math.min(rows, prompts.size()));
            List<List<String>> completions = given.isEmpty()
                    ? sample(modelDir, tokenizer, prompts, samples, grpo, seed)
                    : prompts.stream().map(p -> given).toList();
            List<Row> out = new ArrayList<>();
            for (int p = 0; p < prompts.size(); p++) {
                GrpoPrompt prompt = prompts.get(p);
                List<RewardInput> inputs = completions.get(p).stream()
                        .map(c -> new RewardInput(prompt.text(), c, prompt.fields())).toList();
                Rewards.Scores scores = rewards.score(inputs);
                List<Scored> scored = new ArrayList<>();
                for (int c = 0; c < inputs.size(); c++) {
                    Map<String, Double> byFunction = new LinkedHashMap<>();
                    int index = c;
                    scores.byFunction().forEach((label, values) -> byFunction.put(label, values[index]));
                    scored.add(new Scored(inputs.get(c).completion(), scores.total()[c], byFunction));
                }
                out.add(new Row(prompt.text(), prompt.fields(), scored));
            }
            return out;
        }
    }

    private static List<List<String>> sample(Path modelDir, Tokenizer tokenizer, List<GrpoPrompt> prompts, int samples,
            Recipe.Objective.Grpo grpo, long seed) {
        List<long[]> ids = new ArrayList<>();
        for (GrpoPrompt prompt : prompts) {
            for (int s = 0; s < samples; s++) {
                ids.add(prompt.ids());
            }
        }
        GenerationSettings settings = new GenerationSettings(grpo.maxCompletionLength(), (float) grpo.temperature(), 0,
                1f, seed, Set.of((long) tokenizer.special().eosId()), List.of());
        try (NDManager manager = NDManager.newBaseManager()) {
            List<Completion> done = new Generator(LlamaModel.load(modelDir, manager, LoadOptions.inference()))
                    .generate(ids, settings);
            List<List<String>> out = new ArrayList<>();
            for (int p = 0; p < prompts.size(); p++) {
                List<String> texts = new ArrayList<>();
                for (int s = 0; s < samples; s++) {
                    long[] tokens = done.get(p * samples + s).tokens();
                    texts.add(tokenizer.decode(Arrays.stream(tokens).mapToInt(Math::toIntExact).toArray(), true));
                }
                out.add(texts);
            }
            return out;
        }
    }
}
