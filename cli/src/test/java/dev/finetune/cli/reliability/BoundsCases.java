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
                // #26: every file from a recipe, model folder or dataset is read within a bound
                Case.refused("config.json that is /dev/zero (validate)", BOUNDS, "not a regular file", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    Files.delete(model.resolve("config.json"));
                    Files.createSymbolicLink(model.resolve("config.json"), Path.of("/dev/zero"));
                    return Case.Invocation.of("validate", recipe(dir, with(sft(), "base_model", model.toString()))
                            .toString());
                }),
                Case.refused("config.json of 20 MiB (plan)", BOUNDS, "over 16 MiB", dir -> {
                    Path model = editedModel(dir, "\"vocab_size\": 512,", "\"vocab_size\": 512, \"pad\": \""
                            + "x".repeat(20 << 20) + "\",");
                    return Case.Invocation.of("plan", recipe(dir, with(sft(), "base_model", model.toString())).toString());
                }),
                Case.refused("dataset of 70 MiB without a line break (validate)", BOUNDS, "line 1 is over 64 MiB", dir -> {
                    Path recipe = recipe(dir, sft());
                    endlessLine(dir.resolve("data.jsonl"), 70 << 20);
                    return Case.Invocation.of("validate", recipe.toString());
                }),
                Case.refused("dataset of 70 MiB without a line break (preprocess)", BOUNDS, "line 1 is over 64 MiB", dir -> {
                    Path recipe = recipe(dir, sft());
                    endlessLine(dir.resolve("data.jsonl"), 70 << 20);
                    return Case.Invocation.of("preprocess", recipe.toString());
                }),
                Case.refused("JSON array dataset with one element of 70 MiB (training)", BOUNDS, "over 64 MiB", dir -> {
                    Path recipe = recipe(dir, with(sft(), "datasets", "\n  - path: big.json\n    type: completion",
                            "val_set_size", "0"));
                    try (var out = Files.newBufferedWriter(dir.resolve("big.json"))) {
                        out.write("[{\"text\": \"");
                        char[] block = "a".repeat(1 << 20).toCharArray();
                        for (int i = 0; i < 70; i++) {
                            out.write(block);
                        }
                        out.write("\"}]\n");
                    }
                    return Case.Invocation.of(recipe.toString());
                }).training(),
                Case.refused("base: chain of 3,000 files", BOUNDS, "more than 32 levels deep", dir -> {
                    for (int i = 0; i < 3000; i++) {
                        Files.writeString(dir.resolve("b" + i + ".yaml"), "base: b" + (i + 1) + ".yaml\nseed: " + i + "\n");
                    }
                    Files.writeString(dir.resolve("b3000.yaml"), "seed: 1\n");
                    return Case.Invocation.of("validate", recipe(dir, with(sft(), "base", "b0.yaml")).toString());
                }),
                Case.refused("reward command printing one endless line", BOUNDS, "a line of over 1 MiB", dir -> {
                    Files.writeString(dir.resolve("prompts.jsonl"), "{\"prompt\": \"Once\", \"word\": \"cat\"}\n");
                    Path recipe = recipe(dir, with(sft(), "rl", "grpo", "trl", "\n  num_generations: 2\n"
                            + "  max_completion_length: 8\n  reward_funcs:\n    - {name: judge, command: \"yes | tr -d '\\\\n'\"}",
                            "datasets", "\n  - path: prompts.jsonl\n    type: passthrough", "val_set_size", "0",
                            "micro_batch_size", "2", "sequence_len", "64", "sample_packing", "false"));
                    return Case.Invocation.of("rewards", recipe.toString(), "--dry-run", "--allow-commands",
                            "--completion", "a cat");
                }),
                Case.refused("merge-lora --out a dangling symbolic link", BOUNDS, "symbolic link", dir -> {
                    Path run = Fixtures.finishedRun(dir.resolve("work/run"));
                    Files.createSymbolicLink(dir.resolve("work/dang"), dir.resolve("nowhere"));
                    return Case.Invocation.of("merge-lora", run.toString(), "--out", "dang");
                }),
                Case.refused("merge-lora onto a full disk", BOUNDS, "cannot write the merged model", dir -> {
                    Path run = Fixtures.finishedRun(dir.resolve("work/run"));
                    return Case.Invocation.of("merge-lora", run.toString(), "--out", "merged").fileSizeLimit(300);
                }),
                Case.refused("configs --dir / ls", BOUNDS, "not a recipe library", dir ->
                        Case.Invocation.of("configs", "--dir", "/", "ls")),
                Case.refused("a --sample-prompt of 24k tokens", BOUNDS, "--sample-prompt", dir ->
                        Case.Invocation.of(recipe(dir, sft()).toString(), "--sample-prompt", "Once upon a time ".repeat(6000))),
                new Case("preprocess of 20,000 dataset entries", BOUNDS, 0, "preprocess:", 600, 1200, dir -> {
                    Files.writeString(dir.resolve("one.jsonl"), Fixtures.stories(1));
                    StringBuilder entries = new StringBuilder();
                    for (int i = 0; i < 20_000; i++) {
                        entries.append("\n  - path: one.jsonl\n    type: completion");
                    }
                    return Case.Invocation.of("preprocess", recipe(dir, with(sft(), "datasets", entries.toString(),
                            "val_set_size", "0", "sequence_len", "128")).toString()).writing(dir.resolve("work/out"));
                }, null),
                Case.refused("generate on a folder mid-training", MESSAGES, "no final weights yet", dir -> {
                    Path run = Fixtures.finishedRun(dir.resolve("work/run"));
                    for (String name : List.of("adapter_model.safetensors", "adapter_config.json", "train_results.json")) {
                        Files.delete(run.resolve(name));
                    }
                    return Case.Invocation.of("generate", run.toString(), "--prompt", "Once");
                }).then((dir, o) -> assertFalse(o.err().contains("base_model"), o.err())),
                Case.refused("a FIFO as the dataset (validate)", MESSAGES, "not a regular file", dir -> {
                    Path recipe = recipe(dir, sft());
                    Files.delete(dir.resolve("data.jsonl"));
                    Process mkfifo = new ProcessBuilder("mkfifo", dir.resolve("data.jsonl").toString()).start();
                    if (mkfifo.waitFor() != 0) {
                        throw new IllegalStateException("mkfifo failed");
                    }
                    return Case.Invocation.of("validate", recipe.toString());
                }),
                Case.refused("/dev/urandom as the dataset (training)", MESSAGES, "not a regular file", dir ->
                        Case.Invocation.of(recipe(dir, with(sft(), "datasets", "\n  - path: /dev/urandom\n"
                                + "    type: completion")).toString())),
                Case.refused("a broken dataset row: no parser advice", MESSAGES, "data.jsonl:41", dir -> {
                    Path recipe = recipe(dir, sft());
                    Files.writeString(dir.resolve("data.jsonl"), Fixtures.stories(40) + "{\"text\": oops}\n");
                    return Case.Invocation.of(recipe.toString());
                }).then((dir, o) -> assertFalse(o.err().contains("LENIENT") || o.err().contains("setStrictness")
                        || o.err().contains("JsonReader"), o.err())),
                Case.refused("lora_r=1e400", MESSAGES, "lora_r", dir ->
                        Case.Invocation.of("validate", recipe(dir, sft()).toString(), "lora_r=1e400"))
                        .then((dir, o) -> assertFalse(o.err().contains("9223372036854775807"), o.err())),
                Case.refused("a non-ASCII override key (validate)", MESSAGES, "lörä_r", dir ->
                        Case.Invocation.of("validate", recipe(dir, sft()).toString(), "lörä_r=8"))
                        .then((dir, o) -> assertFalse(o.err().contains("no such file"), o.err())),
                Case.refused("merge-lora onto an existing folder", MESSAGES, "already exists", dir -> {
                    Path run = Fixtures.finishedRun(dir.resolve("work/run"));
                    Files.createDirectories(dir.resolve("work/merged"));
                    return Case.Invocation.of("merge-lora", run.toString(), "--out", "merged");
                }));
    }

    /** A JSON Lines file whose first line never ends within {@code bytes}. */
    static void endlessLine(Path file, int bytes) throws Exception {
        try (var out = Files.newOutputStream(file)) {
            out.write("{\"text\": \"".getBytes(StandardCharsets.UTF_8));
            byte[] block = "a".repeat(1 << 20).getBytes(StandardCharsets.UTF_8);
            for (int i = 0; i < bytes >> 20; i++) {
                out.write(block);
            }
        }
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
