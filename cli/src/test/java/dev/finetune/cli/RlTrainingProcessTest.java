package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import dev.finetune.trainers.train.output.MetricsLog;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The shipped DPO and GRPO quickstarts through {@code finetune RECIPE} in a child JVM: they must visibly work (the
 * issue's targets), write TRL's metric names, and a recipe naming a reward command must be refused, before
 * anything is written, unless the user passes {@code --allow-commands}.
 */
class RlTrainingProcessTest {
    private static final Pattern ACCURACY = Pattern.compile("held-out preference: accuracy ([0-9.]+) -> ([0-9.]+), "
            + "margin ([-0-9.]+) -> ([-0-9.]+)");
    private static final Pattern REWARD = Pattern.compile("reward: ([0-9.]+) over the first \\d+ steps -> ([0-9.]+) "
            + "over the last \\d+; kl ([0-9.]+)");

    private record Run(int exit, String out, String err) {}

    private static Run finetune(Path work, String... args) throws Exception {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:+UseSerialGC", "-Dai.djl.offline=true", "-Dfinetune.home=" + MainProcessTest.repoRoot(),
                "-cp", System.getProperty("java.class.path"), Main.class.getName()));
        command.addAll(List.of(args));
        Path out = work.resolve("stdout.txt");
        Path err = work.resolve("stderr.txt");
        ProcessBuilder builder = new ProcessBuilder(command).directory(work.toFile())
                .redirectOutput(out.toFile()).redirectError(err.toFile());
        builder.environment().put("OMP_WAIT_POLICY", "PASSIVE");
        Process process = builder.start();
        assertTrue(process.waitFor(240, TimeUnit.SECONDS), "finetune did not finish");
        return new Run(process.exitValue(), Files.readString(out), Files.readString(err));
    }

    private static Path shipped(String name) {
        return MainProcessTest.repoRoot().resolve("configs").resolve(name);
    }

    @Test
    @Timeout(300)
    void quickstartDpoLearnsTheHeldOutPreference(@TempDir Path work) throws Exception {
        Run run = finetune(work, shipped("quickstart-dpo.yaml").toString());
        assertEquals(0, run.exit(), run.err());
        Matcher m = ACCURACY.matcher(run.out());
        assertTrue(m.find(), run.out());
        assertTrue(Double.parseDouble(m.group(2)) >= 0.8, m.group());
        assertTrue(Double.parseDouble(m.group(4)) > Double.parseDouble(m.group(3)), m.group());
        Path output = work.resolve("out/quickstart-dpo");
        List<JsonObject> lines = MetricsLog.read(output.resolve(MetricsLog.FILE));
        JsonObject last = lines.get(lines.size() - 1);
        for (String key : List.of("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies",
                "rewards/margins", "eval_rewards/accuracies", "eval_rewards/margins")) {
            assertTrue(last.has(key), key + " missing from " + last);
        }
        assertTrue(Files.isRegularFile(output.resolve("adapter_model.safetensors")));
    }

    @Test
    @Timeout(300)
    void quickstartGrpoRaisesTheReward(@TempDir Path work) throws Exception {
        Run run = finetune(work, shipped("quickstart-grpo.yaml").toString());
        assertEquals(0, run.exit(), run.err());
        Matcher m = REWARD.matcher(run.out());
        assertTrue(m.find(), run.out());
        assertTrue(Double.parseDouble(m.group(2)) >= Double.parseDouble(m.group(1)) + 0.3, m.group());
        List<JsonObject> lines = MetricsLog.read(work.resolve("out/quickstart-grpo").resolve(MetricsLog.FILE));
        JsonObject last = lines.get(lines.size() - 1);
        for (String key : List.of("reward", "reward_std", "rewards/contains/mean", "rewards/contains/std", "kl",
                "completions/mean_length", "clip_ratio/region_mean", "frac_reward_zero_std", "entropy", "eval_reward")) {
            assertTrue(last.has(key), key + " missing from " + last);
        }
    }

    /**
     * TRL's example GRPO configuration (configs/trl-grpo.yaml: its settings under our names, the embedded model and
     * prompts in place of the Hub ones) validates and trains a few steps, logging TRL's GRPO metrics.
     */
    @Test
    @Timeout(300)
    void trlsExampleGrpoConfigurationValidatesAndRuns(@TempDir Path work) throws Exception {
        Run validate = finetune(work, "validate", shipped("trl-grpo.yaml").toString());
        assertEquals(0, validate.exit(), validate.err());
        assertTrue(validate.out().contains("total steps: 48"), "16 prompts x 3 epochs, one prompt a step: " + validate.out());
        Run run = finetune(work, shipped("trl-grpo.yaml").toString(), "max_steps=3");
        assertEquals(0, run.exit(), run.err());
        Path output = work.resolve("out/trl-grpo");
        List<JsonObject> lines = MetricsLog.read(output.resolve(MetricsLog.FILE));
        assertEquals(List.of(3L), lines.stream().map(l -> l.get("step").getAsLong()).toList(),
                "logging_steps 10: only the last of 3 steps is logged");
        JsonObject last = lines.get(0);
        for (String key : List.of("loss", "reward", "reward_std", "rewards/numeric_answer/mean",
                "rewards/numeric_answer/std", "completions/mean_length", "completions/clipped_ratio",
                "clip_ratio/region_mean", "frac_reward_zero_std", "entropy", "learning_rate", "grad_norm")) {
            assertTrue(last.has(key), key + " missing from " + last);
        }
        assertFalse(last.has("kl"), "beta 0: TRL logs no kl");
        assertTrue(last.get("completions/max_length").getAsDouble() <= 256, "max_completion_length: " + last);
        assertTrue(Files.isRegularFile(output.resolve("model.safetensors")), "a full fine-tune, as TRL's script without --use_peft");
    }

    @Test
    void aRewardCommandInTheRecipeIsRefusedWithoutAllowCommands(@TempDir Path work) throws Exception {
        Path recipe = work.resolve("grpo.yaml");
        Files.writeString(recipe, Files.readString(shipped("quickstart-grpo.yaml"))
                .replace("base_model: ./models/stories260K", "base_model: " + shipped("models/stories260K"))
                .replace("path: data/quickstart-grpo.jsonl", "path: " + shipped("data/quickstart-grpo.jsonl"))
                .replace("- {name: contains, field: word}", "- {name: judge, command: \"touch pwned\"}"));
        Run run = finetune(work, recipe.toString());
        assertEquals(2, run.exit(), run.err());
        assertTrue(run.err().contains("--allow-commands"), run.err());
        assertFalse(Files.exists(work.resolve("pwned")), "the command did not run");
        assertFalse(Files.exists(work.resolve("outputs")), "nothing written");
    }
}
