package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code trl.reward_funcs} and the DPO loss keys, read from real recipe files. */
class RewardSpecsTest {

    private static Path recipe(Path dir, String rl, String extra) throws IOException {
        Path r = dir.resolve("r.yaml");
        Files.writeString(r, "base_model: x/y\nrl: " + rl + "\n" + extra
                + "datasets: [{path: org/data, type: passthrough}]\nlearning_rate: 1e-5\n"
                + "micro_batch_size: 2\ngradient_accumulation_steps: 2\n");
        return r;
    }

    private static Recipe.Objective.Grpo grpo(Path dir, String trl) throws IOException {
        return (Recipe.Objective.Grpo) ValidatedRecipe.load(recipe(dir, "grpo", "trl:\n" + trl), List.of())
                .recipe().objective();
    }

    @Test
    void builtInsByNameOrWithParametersAndCommands(@TempDir Path dir) throws IOException {
        Recipe.Objective.Grpo g = grpo(dir, """
                  num_generations: 2
                  reward_funcs:
                    - numeric_answer
                    - {name: contains, words: [dragon, cave], ignore_case: false}
                    - {name: length, min: 3, max: 12, unit: chars, label: short}
                    - {name: judge, command: python3 judge.py}
                  reward_weights: [1, 0.5, 0.1, 2]
                """);
        assertEquals(List.of(
                new RewardSpec.NumericAnswer("numeric_answer", "answer", 1e-6),
                new RewardSpec.Contains("contains", List.of("dragon", "cave"), null, false),
                new RewardSpec.Length("short", 3, 12, "chars"),
                new RewardSpec.Command("judge", "python3 judge.py", dir.toAbsolutePath().normalize())),
                g.rewardFuncs());
        assertEquals(List.of(1.0, 0.5, 0.1, 2.0), g.rewardWeights());
    }

    @Test
    void brokenRewardFunctionsAreAllReportedWithTheirLocation(@TempDir Path dir) throws IOException {
        Path r = recipe(dir, "grpo", """
                trl:
                  num_generations: 2
                  reward_funcs:
                    - rewards.accuracy_reward
                    - exact_mach
                    - {name: regex_match, pattern: "(unclosed"}
                    - {name: contains, word: [x]}
                    - regex_match
                """);
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(r, List.of()));
        String all = e.errors().toString();
        for (String expected : List.of("r.yaml:6:", "Python function", "r.yaml:7:", "did you mean 'exact_match'?",
                "not a valid regular expression", "has no parameter 'word'", "did you mean 'words'?",
                "regex_match needs pattern")) {
            assertTrue(all.contains(expected), expected + " missing from: " + all);
        }
    }

    /** TRL's reward names, as {@code trl grpo --reward_funcs} takes them: its format check is ours, the rest point on. */
    @Test
    void trlsRewardFunctionNames(@TempDir Path dir) throws IOException {
        Recipe.Objective.Grpo g = grpo(dir, "  num_generations: 2\n  reward_funcs: [think_format_reward]\n");
        RewardSpec.Format format = (RewardSpec.Format) g.rewardFuncs().get(0);
        assertEquals("think_format_reward", format.label(), "logged as rewards/think_format_reward, as TRL does");
        // The format built-in matches the whole completion with DOTALL; TRL's docstring examples, and a second block
        java.util.regex.Pattern p = java.util.regex.Pattern.compile(format.pattern(), java.util.regex.Pattern.DOTALL);
        assertTrue(p.matcher("<think>\nThis is my reasoning.\n</think>\nThis is my answer.").matches());
        assertTrue(!p.matcher("<think>\nThis is my reasoning.\nThis is my answer.").matches());
        assertTrue(!p.matcher("<think>a</think> then <think>b</think>").matches(), "one think block only");
        assertTrue(!p.matcher("first <think>a</think>").matches(), "the block opens the completion");
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> grpo(dir,
                "  num_generations: 2\n  reward_funcs: [accuracy_reward, get_soft_overlong_punishment]\n"));
        String all = e.errors().toString();
        for (String expected : List.of("'accuracy_reward' is TRL's Python function",
                "{name: numeric_answer, field: solution}", "math_verify", "{name: length, unit: chars, max: N}")) {
            assertTrue(all.contains(expected), expected + " missing from: " + all);
        }
    }

    /** Parameters are read by the recipe's own key reader: typed, bounded, and an empty value is never silently dropped. */
    @Test
    void parametersAreTypedAndEmptyValuesAreReported(@TempDir Path dir) throws IOException {
        Path r = recipe(dir, "grpo", """
                trl:
                  num_generations: 2
                  reward_funcs:
                    - {name: numeric_answer, tolerance: -1}
                    - {name: exact_match, ignore_case: sometimes}
                    - {name: length, max: }
                    - {name: }
                    - {command: "python3 judge.py", timeout: 0, retries: 2}
                """);
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(r, List.of()));
        String all = e.errors().toString();
        for (String expected : List.of("numeric_answer.tolerance must be 0 or more, got -1",
                "exact_match.ignore_case must be true or false", "reward function length needs max",
                "r.yaml:9:", "needs a name (a built-in) or a command", "timeout must be at least 1, got 0",
                "a command reward takes command, name and timeout, not 'retries'")) {
            assertTrue(all.contains(expected), expected + " missing from: " + all);
        }
        ValidatedRecipe quoted = ValidatedRecipe.load(recipe(dir, "grpo", """
                trl:
                  num_generations: 2
                  reward_funcs:
                    - {command: "python3 judge.py", timeout: "30", label: judge}
                """), List.of());
        assertEquals(List.of(new RewardSpec.Command("judge", "python3 judge.py", dir.toAbsolutePath().normalize(), 30)),
                ((Recipe.Objective.Grpo) quoted.recipe().objective()).rewardFuncs());
    }

    @Test
    void dpoLossTypeIpoAndTheDeprecatedRlIpo(@TempDir Path dir) throws IOException {
        Recipe.Objective.Dpo ipo = (Recipe.Objective.Dpo) ValidatedRecipe.load(
                recipe(dir, "dpo", "dpo_loss_type: [ipo]\n"), List.of()).recipe().objective();
        assertEquals(java.util.List.of(DpoLossType.IPO), ipo.lossTypes());
        ValidatedRecipe old = ValidatedRecipe.load(recipe(dir, "ipo", ""), List.of());
        assertEquals(java.util.List.of(DpoLossType.IPO), ((Recipe.Objective.Dpo) old.recipe().objective()).lossTypes());
        assertTrue(old.warnings().stream().anyMatch(w -> w.toString().contains("dpo_loss_type: [ipo]")));
        assertEquals(List.of(DpoLossType.SIGMOID), ((Recipe.Objective.Dpo) ValidatedRecipe.load(
                recipe(dir, "dpo", ""), List.of()).recipe().objective()).lossTypes());
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(
                recipe(dir, "dpo", "dpo_loss_type: [sigmod]\n"), List.of()));
        assertTrue(e.oneLine().contains("did you mean 'sigmoid'?"), e.oneLine());
    }

    @Test
    void severalDpoLossesWithWeightsAsTrlSumsThem(@TempDir Path dir) throws IOException {
        Recipe.Objective.Dpo rpo = (Recipe.Objective.Dpo) ValidatedRecipe.load(recipe(dir, "dpo",
                "dpo_loss_type: [sigmoid, sft]\ndpo_loss_weights: [1.0, 0.5]\n"), List.of()).recipe().objective();
        assertEquals(List.of(DpoLossType.SIGMOID, DpoLossType.SFT), rpo.lossTypes());
        assertEquals(List.of(1.0, 0.5), rpo.lossWeights());
        InvalidRecipe uneven = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(recipe(dir, "dpo",
                "dpo_loss_type: [sigmoid, sft]\ndpo_loss_weights: [1.0]\n"), List.of()));
        assertTrue(uneven.oneLine().contains("1 weights for 2"), uneven.oneLine());
        InvalidRecipe rpoAlpha = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(recipe(dir, "dpo",
                "rpo_alpha: 0.5\n"), List.of()));
        assertTrue(rpoAlpha.oneLine().contains("dpo_loss_type: [sigmoid, sft]"), rpoAlpha.oneLine());
        InvalidRecipe exo = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(recipe(dir, "dpo",
                "dpo_loss_type: [exo_pair]\n"), List.of()));
        assertTrue(exo.oneLine().contains("dpo_label_smoothing above 0"), exo.oneLine());
        ValidatedRecipe smoothed = ValidatedRecipe.load(recipe(dir, "dpo", "dpo_label_smoothing: 0.1\n"), List.of());
        assertTrue(smoothed.warnings().stream().anyMatch(w -> w.toString().contains("no effect on [sigmoid]")),
                smoothed.warnings().toString());
    }

    @Test
    void thePlanSaysWhichModelIsTheReference(@TempDir Path dir) throws IOException {
        String lora = "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\n";
        assertTrue(ValidatedRecipe.load(recipe(dir, "dpo", lora + "lora_model_dir: ./sft-out\n"), List.of()).describe()
                .contains("reference model: a frozen copy of the adapter in lora_model_dir"));
        assertTrue(ValidatedRecipe.load(recipe(dir, "dpo", lora), List.of()).describe()
                .contains("reference model: the base model (the new adapter switched off)"));
        assertTrue(ValidatedRecipe.load(recipe(dir, "dpo", ""), List.of()).describe()
                .contains("reference model: the starting weights"));
    }

    @Test
    void grpoReadsTrlsLossTypesAndScaleRewardsAsTrlDoes(@TempDir Path dir) throws IOException {
        String rewards = "  reward_funcs: [exact_match]\n  num_generations: 2\n";
        Recipe.Objective.Grpo defaults = grpo(dir, rewards);
        assertEquals(GrpoLossType.DAPO, defaults.lossType(), "TRL's default");
        assertEquals(ScaleRewards.GROUP, defaults.scaleRewards());
        assertEquals(0.2, defaults.epsilonHigh(), "epsilon when not given");
        assertTrue(defaults.biasCorrectedKl(), "TRL's default use_bias_correction_kl");
        Recipe.Objective.Grpo set = grpo(dir, rewards + "  loss_type: dr_grpo\n  scale_rewards: false\n"
                + "  epsilon_high: 0.28\n  delta: 1.5\n  top_p: 0.9\n  top_k: 20\n  min_p: 0.05\n"
                + "  repetition_penalty: 1.1\n  mask_truncated_completions: true\n");
        assertEquals(GrpoLossType.DR_GRPO, set.lossType());
        assertEquals(ScaleRewards.NONE, set.scaleRewards(), "false is none, as TRL reads it");
        assertEquals(1.5, set.delta());
        assertEquals(new Recipe.Objective.Sampling(20, 0.9, 0.05, 1.1), set.sampling());
        assertTrue(set.maskTruncatedCompletions());
        assertEquals(ScaleRewards.BATCH, grpo(dir, rewards + "  scale_rewards: batch\n").scaleRewards());
        InvalidRecipe unknown = assertThrows(InvalidRecipe.class, () -> grpo(dir, rewards + "  loss_type: dapo2\n"));
        assertTrue(unknown.oneLine().contains("did you mean 'dapo'?"), unknown.oneLine());
        InvalidRecipe generation = assertThrows(InvalidRecipe.class,
                () -> grpo(dir, rewards + "  generation_batch_size: 8\n"));
        assertTrue(generation.oneLine().contains("never reused across steps"), generation.oneLine());
    }
}
