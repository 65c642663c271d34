package dev.finetune.cli.reliability;

import static dev.finetune.cli.reliability.Case.Kind.BOUNDS;
import static dev.finetune.cli.reliability.Case.Kind.MESSAGES;
import static dev.finetune.cli.reliability.Fixtures.recipe;
import static dev.finetune.cli.reliability.Fixtures.sft;
import static dev.finetune.cli.reliability.Fixtures.with;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/** Sizes the user controls are bounded and multiplied exactly; messages point at the real cause. */
final class BoundsCases {
    private BoundsCases() {}

    static List<Case> all() {
        return List.of(
                Case.refused("micro x accumulation overflow", BOUNDS, "sequences per optimizer step", dir ->
                        Case.Invocation.of("validate", recipe(dir, sft()).toString(), "micro_batch_size=65536",
                                "gradient_accumulation_steps=65536")),
                Case.refused("micro_batch_size beyond int", BOUNDS, "at most 2147483647", dir ->
                        Case.Invocation.of("validate", recipe(dir, sft()).toString(), "micro_batch_size=99999999999999999999"))
                        .then((dir, o) -> assertFalse(o.err().contains("9223372036854775807"), o.err())),
                Case.refused("hardware.gpus 5000", BOUNDS, "hardware.gpus", dir ->
                        Case.Invocation.of("validate", recipe(dir, with(sft(), "hardware", "{gpus: 5000}", "backend",
                                "auto")).toString())),
                Case.refused("plan --gpus 0", MESSAGES, "--gpus", dir ->
                        Case.Invocation.of("plan", recipe(dir, sft()).toString(), "--gpus", "0")),
                Case.refused("plan --nodes 100000", BOUNDS, "--nodes", dir ->
                        Case.Invocation.of("plan", recipe(dir, sft()).toString(), "--gpus", "8", "--nodes", "100000",
                                "--gpu-memory", "80GiB")),
                Case.refused("sequence_len beyond context (validate)", BOUNDS, "beyond the model's context", dir ->
                        Case.Invocation.of("validate", recipe(dir, sft()).toString(), "sequence_len=100000")),
                Case.refused("sequence_len beyond context (plan)", BOUNDS, "beyond the model's context", dir ->
                        Case.Invocation.of("plan", recipe(dir, sft()).toString(), "sequence_len=4096")),
                Case.refused("generate --max-new-tokens 100000000", BOUNDS, "--max-new-tokens", dir ->
                        Case.Invocation.of("generate", Fixtures.model().toString(), "--prompt", "Once",
                                "--max-new-tokens", "100000000")),
                Case.refused("generate a 5000-word prompt", BOUNDS, "--prompt", dir ->
                        Case.Invocation.of("generate", Fixtures.model().toString(), "--prompt",
                                "word ".repeat(5000))),
                Case.refused("config.json vocab_size 3000000000", BOUNDS, "vocab_size", dir -> {
                    Path model = editedModel(dir, "\"vocab_size\": 512", "\"vocab_size\": 3000000000");
                    return Case.Invocation.of("plan", recipe(dir, with(sft(), "base_model", model.toString())).toString());
                }),
                Case.refused("save_steps 0", MESSAGES, "greater than 0", dir ->
                        Case.Invocation.of("validate", recipe(dir, sft()).toString(), "save_steps=0"))
                        .then((dir, o) -> assertFalse(o.err().contains("E-324"), o.err())),
                Case.refused("malformed config.json", MESSAGES, "not a JSON object", dir -> {
                    Path model = editedModel(dir, "\"vocab_size\": 512,", "\"vocab_size\": 512,,");
                    return Case.Invocation.of("generate", model.toString(), "--prompt", "Once");
                }).then((dir, o) -> assertFalse(o.err().toLowerCase().contains("gson"), o.err())),
                Case.refused("config.json value of the wrong type", MESSAGES, "config.json", dir -> {
                    Path model = editedModel(dir, "\"rope_theta\": 10000.0", "\"rope_theta\": \"fast\"");
                    return Case.Invocation.of("generate", model.toString(), "--prompt", "Once");
                }),
                Case.refused("dataset with undecodable bytes", MESSAGES, "data.jsonl:3", dir -> {
                    Fixtures.recipe(dir, sft());
                    byte[] bad = (Fixtures.stories(2) + "{\"text\": \"broken \u0000\"}\n").getBytes(StandardCharsets.UTF_8);
                    bad[bad.length - 5] = (byte) 0xff;
                    Files.write(dir.resolve("data.jsonl"), bad);
                    return Case.Invocation.of("validate", dir.resolve("recipe.yaml").toString());
                }),
                Case.refused("invisible character in a key", MESSAGES, "lora_r\\u200b", dir ->
                        Case.Invocation.of("validate", recipe(dir, with(sft(), "lora_r\u200b", "8")).toString())),
                Case.refused("no arguments", MESSAGES, "no recipe given", dir -> Case.Invocation.of()),
                Case.refused("merge-lora onto an existing folder", MESSAGES, "already exists", dir -> {
                    Path run = Fixtures.finishedRun(dir.resolve("work/run"));
                    Files.createDirectories(dir.resolve("work/merged"));
                    return Case.Invocation.of("merge-lora", run.toString(), "--out", "merged");
                }));
    }

    static Path editedModel(Path dir, String from, String to) throws Exception {
        Path model = dir.resolve("model");
        Fixtures.copyTree(Fixtures.model(), model);
        Path config = model.resolve("config.json");
        String text = Files.readString(config);
        if (!text.contains(from)) {
            throw new IllegalStateException("config.json has no " + from);
        }
        Files.writeString(config, text.replace(from, to));
        return model;
    }
}
