package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code finetune rewards RECIPE --dry-run} in a child JVM, with a real reward program in Python. */
class RewardsCommandTest {

    private static Path recipe(Path dir, String command) throws IOException {
        Files.writeString(dir.resolve("prompts.jsonl"), """
                {"prompt": "Tom saw a dog.", "word": "dog"}
                {"prompt": "Sue had a cat.", "word": "cat"}
                """);
        Files.writeString(dir.resolve("judge.py"), """
                import json, sys
                for line in sys.stdin:
                    row = json.loads(line)
                    print(2.0 if row["fields"]["word"] in row["completion"] else -1.0, flush=True)
                """);
        Path recipe = dir.resolve("grpo.yaml");
        Files.writeString(recipe, "base_model: " + MainProcessTest.repoRoot().resolve("configs/models/stories260K") + """

                rl: grpo
                trl:
                  num_generations: 2
                  max_completion_length: 8
                  reward_funcs:
                    - {name: contains, field: word}
                    - {name: judge, command: "%s"}
                  reward_weights: [1.0, 0.5]
                datasets: [{path: prompts.jsonl, type: passthrough}]
                learning_rate: 1e-3
                micro_batch_size: 2
                gradient_accumulation_steps: 1
                """.formatted(command));
        return recipe;
    }

    @Test
    void scoresGivenCompletionsWithBuiltInsAndACommandOnlyWhenAllowed(@TempDir Path dir) throws Exception {
        Path recipe = recipe(dir, "python3 judge.py");
        MainProcessTest.Run refused = MainProcessTest.run(dir, "rewards", recipe.toString(), "--dry-run",
                "--completion", "a dog");
        assertEquals(2, refused.exit(), refused.err());
        assertTrue(refused.err().contains("--allow-commands") && refused.err().contains("python3 judge.py"),
                refused.err());
        assertFalse(refused.err().contains("\tat "), "no stack trace");

        MainProcessTest.Run run = MainProcessTest.run(dir, "rewards", recipe.toString(), "--dry-run",
                "--allow-commands", "--completion", "a dog ran", "--completion", "nothing");
        assertEquals(0, run.exit(), run.err());
        // row 1 (word dog): 1 + 0.5·2 = 2 and 0 + 0.5·(−1) = −0.5; row 2 (word cat): −0.5 twice
        assertTrue(run.out().contains("reward 2.000 [ contains=1.00 judge=2.00 ] \"a dog ran\""), run.out());
        assertTrue(run.out().contains("reward -0.500 [ contains=0.00 judge=-1.00 ] \"nothing\""), run.out());
        assertTrue(run.out().contains("prompt: \"Sue had a cat.\""), run.out());
    }

    @Test
    void aRewardCommandPrintingGarbageStopsWithItsOutputQuoted(@TempDir Path dir) throws Exception {
        Path recipe = recipe(dir, "while read line; do echo oops; done");
        MainProcessTest.Run run = MainProcessTest.run(dir, "rewards", recipe.toString(), "--dry-run",
                "--allow-commands", "--completion", "x");
        assertEquals(2, run.exit(), run.err());
        assertTrue(run.err().contains("printed 'oops' where a number was expected"), run.err());
    }

    @Test
    void samplesCompletionsFromTheBaseModelWhenNoneAreGiven(@TempDir Path dir) throws Exception {
        Path recipe = recipe(dir, "python3 judge.py");
        MainProcessTest.Run run = MainProcessTest.run(dir, "rewards", recipe.toString(), "--dry-run",
                "--allow-commands", "--rows", "1", "--samples", "3");
        assertEquals(0, run.exit(), run.err());
        assertEquals(3, run.out().lines().filter(l -> l.startsWith("  reward ")).count(), run.out());
    }
}
