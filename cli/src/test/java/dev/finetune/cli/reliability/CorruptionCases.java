package dev.finetune.cli.reliability;

import static dev.finetune.cli.reliability.Case.Kind.CORRUPTION;
import static dev.finetune.cli.reliability.Fixtures.recipe;
import static dev.finetune.cli.reliability.Fixtures.sft;
import static dev.finetune.cli.reliability.Fixtures.with;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonParser;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/** Corrupt state is never trained on: checkpoints, tensor files, metrics, reward programs, preference data. */
final class CorruptionCases {
    private CorruptionCases() {}

    static List<Case> all() {
        return List.of(
                Case.works("corrupt newest checkpoint: falls back", CORRUPTION, "resuming from checkpoint-1 instead",
                        dir -> {
                            Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                            flipBytes(out.resolve("checkpoint-2/adapter_model.safetensors"));
                            return resume(dir, out, "max_steps=3");
                        }).training().then((dir, o) -> assertEquals(List.of(0, 1, 2, 3), steps(dir.resolve("work/out")))),
                Case.refused("every checkpoint corrupt", CORRUPTION, "no intact checkpoint", dir -> {
                    Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                    flipBytes(out.resolve("checkpoint-1/optimizer.safetensors"));
                    flipBytes(out.resolve("checkpoint-2/adapter_model.safetensors"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3", "resume_from_checkpoint=true");
                }),
                Case.refused("named checkpoint corrupt", CORRUPTION, "damaged checkpoint", dir -> {
                    Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                    flipBytes(out.resolve("checkpoint-2/adapter_model.safetensors"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3",
                            "resume_from_checkpoint=checkpoint-2");
                }),
                Case.works("finetune_state global_step 999999: falls back", CORRUPTION,
                        "resuming from checkpoint-1 instead", dir -> {
                            Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                            Path state = out.resolve("checkpoint-2/finetune_state.json");
                            Files.writeString(state, Files.readString(state).replaceFirst("\"global_step\": 2",
                                    "\"global_step\": 999999"));
                            return resume(dir, out, "max_steps=3");
                        }).training(),
                Case.refused("finetune_state garbage everywhere", CORRUPTION, "no intact checkpoint", dir -> {
                    Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                    Files.writeString(out.resolve("checkpoint-1/finetune_state.json"), "{\"global_step\": [}");
                    Files.writeString(out.resolve("checkpoint-2/finetune_state.json"), "\u0000\u0001garbage");
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3", "resume_from_checkpoint=true");
                }),
                // #26: never passed over (the run would save over it) nor used unchecked: refused, naming the file
                Case.refused("checksums missing in newest: refused", CORRUPTION,
                        "checkpoint-2/checksums.sha256: checkpoint-2 has no checksums.sha256", dir -> {
                            Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                            Files.delete(out.resolve("checkpoint-2/checksums.sha256"));
                            return resume(dir, out, "max_steps=3");
                        }).training(),
                Case.refused("checksums missing in the checkpoint named: refused", CORRUPTION,
                        "checkpoint-1 has no checksums.sha256", dir -> {
                            Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                            Files.delete(out.resolve("checkpoint-1/checksums.sha256"));
                            return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3",
                                    "resume_from_checkpoint=" + out.resolve("checkpoint-1"));
                        }).training(),
                Case.refused("resume from a Hugging Face Trainer checkpoint", CORRUPTION,
                        "is a Hugging Face Trainer checkpoint", dir -> {
                            // what HF's Trainer leaves: its trainer_state.json and the weights, none of our state
                            Path hf = Files.createDirectories(dir.resolve("hf/checkpoint-500"));
                            Files.writeString(hf.resolve("trainer_state.json"), "{\"global_step\": 500, "
                                    + "\"log_history\": [], \"max_steps\": 1000}\n");
                            Files.writeString(hf.resolve("adapter_config.json"), "{}\n");
                            return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3",
                                    "resume_from_checkpoint=" + hf.toAbsolutePath());
                        }),
                Case.refused("resume with another seed", CORRUPTION, "seed", dir -> {
                    Fixtures.finishedRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3", "seed=7",
                            "resume_from_checkpoint=true");
                }),
                Case.refused("resume with other accumulation", CORRUPTION, "gradient_accumulation_steps", dir -> {
                    Fixtures.finishedRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, with(sft(), "gradient_accumulation_steps", "2")).toString(),
                            "max_steps=3", "resume_from_checkpoint=true");
                }),
                Case.refused("safetensors tensors overlap", CORRUPTION, "share bytes", dir -> {
                    Path model = craftedModel(dir, CorruptionCases::overlapTwoTensors);
                    return Case.Invocation.of("generate", model.toString(), "--prompt", "Once", "--max-new-tokens", "2");
                }),
                Case.refused("safetensors negative shape", CORRUPTION, "negative dimension", dir -> {
                    Path model = craftedModel(dir, header -> header.replaceFirst(
                            "(\"model\\.norm\\.weight\":\\{[^}]*\"shape\":\\[)\\d\\d\\]", "$1-1]"));
                    return Case.Invocation.of("generate", model.toString(), "--prompt", "Once", "--max-new-tokens", "2");
                }),
                Case.refused("safetensors entry without dtype", CORRUPTION, "model.safetensors", dir -> {
                    Path model = craftedModel(dir, header -> header.replaceFirst(
                            "(\"model\\.norm\\.weight\":\\{)\"dtype\":\"[A-Z0-9]+\",", "$1"));
                    return Case.Invocation.of("generate", model.toString(), "--prompt", "Once", "--max-new-tokens", "2");
                }),
                // #26: the checkpoint whose weights produced the non-finite loss is never the "good" one
                Case.refused("NaN loss stops the run", CORRUPTION, "no checkpoint from before the divergence", dir ->
                        Case.Invocation.of(recipe(dir, with(sft(), "learning_rate", "1e30")).toString(),
                                "max_steps=3").writing(dir.resolve("work/out")))
                        .training().then((dir, o) -> {
                            Path out = dir.resolve("work/out");
                            assertTrue(o.err().contains("step 2: the loss is"), o.err());
                            assertTrue(Files.isDirectory(out.resolve("nonfinite-checkpoint-1")), "set aside");
                            assertFalse(Files.exists(out.resolve("checkpoint-1")), "a poisoned checkpoint kept");
                            assertFalse(Files.exists(out.resolve("checkpoint-2")));
                            assertFalse(Files.exists(out.resolve("adapter_model.safetensors")));
                            everyLineParses(out);
                        }),
                Case.refused("NaN stop after a resume names the checkpoint before the divergence", CORRUPTION,
                        "checkpoint-2 holds the last good state", dir -> {
                            Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                            return resume(dir, out, "max_steps=5", "learning_rate=1e30");
                        }).training().then((dir, o) -> {
                            Path out = dir.resolve("work/out");
                            assertTrue(Files.isDirectory(out.resolve("nonfinite-checkpoint-3")), "set aside");
                            assertTrue(Files.isDirectory(out.resolve("checkpoint-2")), "the good one kept");
                            assertFalse(Files.exists(out.resolve("checkpoint-3")), "a poisoned checkpoint kept");
                        }),
                Case.refused("resume after the base model's weights changed", CORRUPTION, "base_model_content", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    Path recipe = recipe(dir, with(sft(), "base_model", model.toString()));
                    trainOnce(dir, recipe);
                    flipBytes(model.resolve("model.safetensors"));
                    return Case.Invocation.of(recipe.toString(), "max_steps=3", "resume_from_checkpoint=true");
                }),
                Case.refused("resume with another val_set_size", CORRUPTION, "val_set_size: 0.1 → 0.105", dir -> {
                    Fixtures.finishedRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3", "val_set_size=0.105",
                            "resume_from_checkpoint=true");
                }),
                Case.works("resume with another learning_rate says so", CORRUPTION,
                        "resuming with learning_rate: 0.003 → 0.001", dir -> {
                            Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                            return resume(dir, out, "max_steps=3", "learning_rate=1e-3");
                        }).training(),
                Case.refused("output_dir inside the base model's folder", CORRUPTION, "lies inside the run's input", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    return Case.Invocation.of(recipe(dir, with(sft(), "base_model", model.toString())).toString(),
                            "output_dir=" + model.resolve("out"));
                }),
                Case.refused("output_dir inside a dataset folder", CORRUPTION, "lies inside the run's input", dir -> {
                    Path data = Files.createDirectories(dir.resolve("work/data"));
                    Files.writeString(data.resolve("stories.jsonl"), Fixtures.stories(40));
                    return Case.Invocation.of(recipe(dir, with(sft(), "datasets", "\n  - path: " + data
                            + "\n    type: completion")).toString(), "output_dir=data/out");
                }),
                Case.refused("preprocess into the base model's folder", CORRUPTION, "is the run's input", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    return Case.Invocation.of("preprocess", recipe(dir, with(sft(), "base_model", model.toString()))
                            .toString(), "output_dir=" + model);
                }),
                Case.refused("preprocess into a folder of the user's", CORRUPTION, "not written by finetune", dir -> {
                    Path mine = Files.createDirectories(dir.resolve("work/mine"));
                    Files.writeString(mine.resolve("thesis.txt"), "chapter 1\n");
                    return Case.Invocation.of("preprocess", recipe(dir, sft()).toString(), "output_dir=mine");
                }),
                Case.refused("generate from weights holding NaN", CORRUPTION, "NaN or Inf", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    python(dir, "from safetensors.torch import load_file, save_file\n"
                            + "t = load_file('" + model.resolve("model.safetensors") + "')\n"
                            + "t['model.norm.weight'][:] = float('nan')\n"
                            + "save_file(t, '" + model.resolve("model.safetensors") + "', metadata={'format': 'pt'})\n");
                    return Case.Invocation.of("generate", model.toString(), "--prompt", "Once", "--max-new-tokens", "4");
                }),
                Case.refused("generate with a temperature of 1e-39", CORRUPTION, "temperature", dir ->
                        Case.Invocation.of("generate", Fixtures.model().toString(), "--prompt", "Once",
                                "--max-new-tokens", "4", "--temperature", "1e-39")),
                Case.refused("a NUL character in a dataset row", CORRUPTION, "data.jsonl:41", dir -> {
                    Path recipe = recipe(dir, sft());
                    Files.writeString(dir.resolve("data.jsonl"), Fixtures.stories(40)
                            + "{\"text\": \"Once upon a \\u0000 time\"}\n");
                    return Case.Invocation.of(recipe.toString());
                }),
                Case.refused("vocab_size below the tokenizer's ids", CORRUPTION, "beyond the model's vocabulary", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    python(dir, "import json\nfrom safetensors.torch import load_file, save_file\n"
                            + "m = '" + model + "'\n"
                            + "t = load_file(m + '/model.safetensors')\n"
                            + "t = {k: (v[:300].contiguous() if v.shape[0] == 512 else v) for k, v in t.items()}\n"
                            + "save_file(t, m + '/model.safetensors', metadata={'format': 'pt'})\n"
                            + "c = json.load(open(m + '/config.json')); c['vocab_size'] = 300\n"
                            + "json.dump(c, open(m + '/config.json', 'w'))\n");
                    return Case.Invocation.of(recipe(dir, with(sft(), "base_model", model.toString())).toString(),
                            "--sample-prompt", "a");
                }),
                Case.works("stop_on_nonfinite: false trains on", CORRUPTION, "saved adapter", dir ->
                        Case.Invocation.of(recipe(dir, with(sft(), "learning_rate", "1e30", "stop_on_nonfinite",
                                "false")).toString(), "max_steps=3").writing(dir.resolve("work/out")))
                        .training().then((dir, o) -> {
                            everyLineParses(dir.resolve("work/out"));
                            assertTrue(o.out().contains("sample after training:  none (the model's logits hold NaN"),
                                    o.out());
                        }),
                Case.refused("reward command prints extra lines", CORRUPTION, "more lines than completions", dir ->
                        rewards(dir, "while read l; do echo 1; echo 2; done", "")),
                Case.refused("reward command hangs with children", CORRUPTION, "nothing for 2 s", dir ->
                        rewards(dir, "sleep 300 & sleep 300 & read x; sleep 300", ", timeout: 2")),
                Case.works("DPO pairs chosen == rejected warned", CORRUPTION, "1 of 5 preference rows have chosen == rejected", dir -> {
                    Files.writeString(dir.resolve("pairs.jsonl"), """
                            {"prompt": "Hi.", "chosen": " Hello there.", "rejected": " Hello there."}
                            {"prompt": "Go.", "chosen": " Yes.", "rejected": " No."}
                            {"prompt": "Run.", "chosen": "   ", "rejected": " Fast."}
                            {"prompt": "Sit.", "chosen": " Down.", "rejected": " Up."}
                            {"prompt": "Eat.", "chosen": " Soup.", "rejected": " Bread."}
                            """);
                    Path recipe = recipe(dir, with(sft(), "rl", "dpo", "datasets",
                            "\n  - path: pairs.jsonl\n    type: passthrough", "val_set_size", "0", "sequence_len", "64",
                            "sample_packing", "false"));
                    return Case.Invocation.of("validate", recipe.toString());
                }));
    }

    /** Trains {@code recipe} two steps into work/out (the setup of a case that then changes an input). */
    static void trainOnce(Path dir, Path recipe) throws Exception {
        Process p = Runner.start(dir.resolve("work"), List.of(recipe.toString(), "max_steps=2"), dir.resolve("setup.log"));
        if (!p.waitFor(Case.TRAIN_SECONDS, java.util.concurrent.TimeUnit.SECONDS) || p.exitValue() != 0) {
            p.destroyForcibly();
            throw new IllegalStateException("the setup run failed: " + Files.readString(dir.resolve("setup.log.err")));
        }
    }

    /** Runs a script with the project's Python (torch, safetensors), to craft a model file. */
    static void python(Path dir, String script) throws Exception {
        Path file = dir.resolve("craft.py");
        Files.writeString(file, script);
        Process p = new ProcessBuilder(Runner.repoRoot().resolve(".venv/bin/python").toString(), file.toString())
                .redirectErrorStream(true).start();
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (p.waitFor() != 0) {
            throw new IllegalStateException("crafting failed: " + output);
        }
        Files.delete(file);
    }

    private static Case.Invocation resume(Path dir, Path out, String... more) throws Exception {
        List<String> args = new java.util.ArrayList<>(List.of(recipe(dir, sft()).toString(), "resume_from_checkpoint=true"));
        args.addAll(List.of(more));
        return new Case.Invocation(args, List.of(out), null, null, null);
    }

    private static Case.Invocation rewards(Path dir, String command, String extra) throws Exception {
        Files.writeString(dir.resolve("prompts.jsonl"), """
                {"prompt": "Once upon a time", "word": "dragon"}
                {"prompt": "One day", "word": "cat"}
                """);
        Path recipe = recipe(dir, with(sft(), "rl", "grpo", "trl", "\n  num_generations: 2\n  max_completion_length: 8\n"
                + "  reward_funcs:\n    - {name: judge, command: \"" + command + "\"" + extra + "}",
                "datasets", "\n  - path: prompts.jsonl\n    type: passthrough", "val_set_size", "0",
                "micro_batch_size", "2", "sequence_len", "64", "sample_packing", "false"));
        return Case.Invocation.of("rewards", recipe.toString(), "--dry-run", "--allow-commands", "--rows", "2",
                "--completion", "a dragon", "--completion", "a cat");
    }

    static List<Integer> steps(Path out) {
        return dev.finetune.trainers.train.output.MetricsLog.read(out.resolve("metrics.jsonl")).stream()
                .map(line -> line.get("step").getAsInt()).toList();
    }

    /** metrics.jsonl is strict JSON, line by line (no bare NaN). */
    static void everyLineParses(Path out) throws Exception {
        for (String line : Files.readAllLines(out.resolve("metrics.jsonl"))) {
            com.google.gson.stream.JsonReader reader = new com.google.gson.stream.JsonReader(new java.io.StringReader(line));
            reader.setLenient(false);
            JsonParser.parseReader(reader);
            assertFalse(line.contains("NaN") || line.contains("Infinity"), line);
        }
    }

    /** The second of two same-sized tensors made to point at the first one's bytes. */
    static String overlapTwoTensors(String header) {
        com.google.gson.JsonObject json = JsonParser.parseString(header).getAsJsonObject();
        java.util.Map<Long, String> bySize = new java.util.HashMap<>();
        for (String name : json.keySet()) {
            if (name.equals("__metadata__")) {
                continue;
            }
            com.google.gson.JsonArray offsets = json.getAsJsonObject(name).getAsJsonArray("data_offsets");
            long size = offsets.get(1).getAsLong() - offsets.get(0).getAsLong();
            String first = bySize.putIfAbsent(size, name);
            if (first != null && size > 0) {
                json.getAsJsonObject(name).add("data_offsets", json.getAsJsonObject(first).get("data_offsets").deepCopy());
                return json.toString();
            }
        }
        throw new IllegalStateException("no two tensors of one size");
    }

    /** Overwrites 64 bytes in the middle of a file: what a failing disk or a stray write does. */
    static void flipBytes(Path file) throws Exception {
        byte[] bytes = Files.readAllBytes(file);
        for (int i = bytes.length / 2; i < Math.min(bytes.length, bytes.length / 2 + 64); i++) {
            bytes[i] = (byte) ~bytes[i];
        }
        Files.write(file, bytes);
    }

    /** A copy of the embedded model whose safetensors header was rewritten by {@code edit} (same length padded). */
    static Path craftedModel(Path dir, java.util.function.UnaryOperator<String> edit) throws Exception {
        Path model = dir.resolve("model");
        Fixtures.copyTree(Fixtures.model(), model);
        Path file = model.resolve("model.safetensors");
        byte[] bytes = Files.readAllBytes(file);
        long headerLength = ByteBuffer.wrap(bytes, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        String header = new String(bytes, 8, (int) headerLength, StandardCharsets.UTF_8);
        String edited = edit.apply(header);
        if (edited.equals(header)) {
            throw new IllegalStateException("the edit matched nothing in " + header.substring(0, 200));
        }
        if (edited.length() > headerLength) {
            throw new IllegalStateException("the edit grew the header");
        }
        edited = edited + " ".repeat((int) headerLength - edited.getBytes(StandardCharsets.UTF_8).length);
        System.arraycopy(edited.getBytes(StandardCharsets.UTF_8), 0, bytes, 8, (int) headerLength);
        Files.write(file, bytes);
        return model;
    }
}
