package dev.finetune.trainers.rewards;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import dev.finetune.recipes.RewardSpec;
import dev.finetune.recipes.UserError;
import java.net.URISyntaxException;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The built-in reward functions, and an external reward program run as a real process. */
class RewardsTest {

    private static RewardInput input(String completion, String field, String value) {
        JsonObject fields = new JsonObject();
        fields.addProperty(field, value);
        return new RewardInput("prompt", completion, fields);
    }

    private static double[] score(RewardSpec spec, RewardInput... inputs) {
        try (Rewards rewards = Rewards.start(List.of(spec), List.of(), false)) {
            return rewards.score(List.of(inputs)).total();
        }
    }

    @Test
    void builtIns() {
        assertArrayEquals(new double[] {1, 0, 1}, score(new RewardSpec.ExactMatch("e", "answer", true),
                input(" Paris\n", "answer", "paris"), input("Paris.", "answer", "paris"),
                input("PARIS", "answer", "Paris")));
        assertArrayEquals(new double[] {1, 0}, score(new RewardSpec.RegexMatch("r", "\\bdog\\b", false),
                input("a dog ran", "x", ""), input("dogs ran", "x", "")));
        assertArrayEquals(new double[] {1, 1, 0, 0}, score(new RewardSpec.NumericAnswer("n", "answer", 1e-6),
                input("so the answer is 1,234.", "answer", "#### 1234"), input("3 then 42", "answer", "42.0"),
                input("42 then 3", "answer", "42"), input("no number", "answer", "42")));
        assertArrayEquals(new double[] {1, 0, 0}, score(new RewardSpec.Length("l", 2, 3, "words"),
                input("two words", "x", ""), input("one", "x", ""), input("a b c d", "x", "")));
        assertArrayEquals(new double[] {1, 0.5, 0}, score(new RewardSpec.Contains("c", List.of("dog", "cat"), null, true),
                input("The Dog and the cat", "x", ""), input("a dog, a category", "x", ""), input("none", "x", "")));
        assertArrayEquals(new double[] {1, 0}, score(new RewardSpec.Contains("c", List.of(), "word", true),
                input("a red apple", "word", "apple"), input("a pear", "word", "apple")));
        assertArrayEquals(new double[] {1, 0}, score(new RewardSpec.Format("f", "<think>.*?</think>\\s*<answer>.*?</answer>"),
                input("<think>a\nb</think> <answer>4</answer>", "x", ""), input("<answer>4</answer>", "x", "")));
    }

    @Test
    void weightsMakeTheTotalAndEachFunctionIsReported() {
        try (Rewards rewards = Rewards.start(List.of(new RewardSpec.RegexMatch("has_a", "a", false),
                new RewardSpec.RegexMatch("has_b", "b", false)), List.of(1.0, 0.5), false)) {
            Rewards.Scores scores = rewards.score(List.of(input("ab", "x", ""), input("b", "x", "")));
            assertArrayEquals(new double[] {1.5, 0.5}, scores.total());
            assertArrayEquals(new double[] {0, 1}, new double[] {scores.byFunction().get("has_a")[1],
                scores.byFunction().get("has_b")[1]});
        }
    }

    @Test
    void aMissingFieldNamesTheFieldsTheRowHas() {
        UserError e = assertThrows(UserError.class, () -> score(new RewardSpec.ExactMatch("e", "answer", false),
                input("x", "solution", "4")));
        assertTrue(e.oneLine().contains("no field 'answer' (it has solution)"), e.oneLine());
    }

    private static Path resources() throws URISyntaxException {
        return Path.of(RewardsTest.class.getResource("/rewards/mentions_word.py").toURI()).getParent();
    }

    @Test
    void anExternalCommandScoresJsonLinesInOneProcessPerRun() throws Exception {
        RewardSpec.Command command = new RewardSpec.Command("judge", "python3 mentions_word.py", resources());
        try (Rewards rewards = Rewards.start(List.of(command), List.of(2.0), true)) {
            Rewards.Scores first = rewards.score(List.of(input("a dog", "word", "dog"), input("a cat", "word", "dog")));
            assertArrayEquals(new double[] {1.0, 0.1}, first.byFunction().get("judge"), 1e-9);
            assertArrayEquals(new double[] {2.0, 0.2}, first.total(), 1e-9);
            // the same process answers later batches: its counter goes on
            Rewards.Scores second = rewards.score(List.of(input("dog", "word", "dog")));
            assertArrayEquals(new double[] {1.2}, second.byFunction().get("judge"), 1e-9);
        }
    }

    @Test
    void aCommandIsRefusedWithoutAllowCommands() throws Exception {
        RewardSpec.Command command = new RewardSpec.Command("judge", "python3 mentions_word.py", resources());
        UserError e = assertThrows(UserError.class, () -> Rewards.start(List.of(command), List.of(), false));
        assertTrue(e.oneLine().contains("--allow-commands") && e.oneLine().contains("python3 mentions_word.py"),
                e.oneLine());
    }

    @Test
    void crashingAndGarbagePrintingCommandsStopWithAClearError() {
        RewardSpec.Command crashes = new RewardSpec.Command("crash", "read line; echo broken >&2; exit 3", null);
        try (Rewards rewards = Rewards.start(List.of(crashes), List.of(), true)) {
            UserError e = assertThrows(UserError.class, () -> rewards.score(List.of(input("a", "x", ""))));
            assertTrue(e.oneLine().contains("exited with code 3 after 0 of 1 scores"), e.oneLine());
            assertTrue(e.oneLine().contains("broken"), "quotes stderr: " + e.oneLine());
        }
        RewardSpec.Command garbage = new RewardSpec.Command("garbage", "while read l; do echo nope; done", null);
        try (Rewards rewards = Rewards.start(List.of(garbage), List.of(), true)) {
            UserError e = assertThrows(UserError.class, () -> rewards.score(List.of(input("a", "x", ""))));
            assertTrue(e.oneLine().contains("printed 'nope' where a number was expected"), e.oneLine());
        }
        RewardSpec.Command nan = new RewardSpec.Command("nan", "while read l; do echo NaN; done", null);
        try (Rewards rewards = Rewards.start(List.of(nan), List.of(), true)) {
            assertThrows(UserError.class, () -> rewards.score(List.of(input("a", "x", ""))));
        }
    }
}
