package dev.finetune.cli.reliability;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/** Recipes, data and finished runs the cases start from; all tiny (the embedded 260K model, 40 stories). */
final class Fixtures {
    private static Path finishedRun;

    private Fixtures() {}

    static Path model() {
        return Runner.repoRoot().resolve("configs/models/stories260K");
    }

    /** The quickstart's LoRA SFT, one step, a checkpoint after every step. */
    static Map<String, String> sft() {
        Map<String, String> keys = new LinkedHashMap<>();
        keys.put("base_model", model().toString());
        keys.put("datasets", "\n  - path: data.jsonl\n    type: completion");
        keys.put("val_set_size", "0.1");
        keys.put("output_dir", "./out");
        keys.put("adapter", "lora");
        keys.put("lora_r", "8");
        keys.put("lora_alpha", "16");
        keys.put("lora_dropout", "0.0");
        keys.put("lora_target_linear", "true");
        keys.put("sequence_len", "256");
        keys.put("sample_packing", "true");
        keys.put("micro_batch_size", "4");
        keys.put("gradient_accumulation_steps", "1");
        keys.put("max_steps", "1");
        keys.put("learning_rate", "3e-3");
        keys.put("lr_scheduler", "cosine");
        keys.put("warmup_steps", "0");
        keys.put("optimizer", "adamw_torch");
        keys.put("save_steps", "1");
        keys.put("seed", "42");
        keys.put("hardware", "cpu");
        keys.put("backend", "single");
        return keys;
    }

    /** {@link #sft()} as a full fine-tune. */
    static Map<String, String> full() {
        Map<String, String> keys = sft();
        keys.keySet().removeIf(k -> k.startsWith("lora_") || k.equals("adapter"));
        return keys;
    }

    /** Writes {@code dir/recipe.yaml} from {@code keys} (values are YAML; null removes a key) and its data. */
    static Path recipe(Path dir, Map<String, String> keys) throws IOException {
        return recipe(dir, "recipe.yaml", keys);
    }

    static Path recipe(Path dir, String name, Map<String, String> keys) throws IOException {
        StringBuilder text = new StringBuilder();
        keys.forEach((key, value) -> {
            if (value != null) {
                text.append(key).append(':').append(value.startsWith("\n") ? "" : " ").append(value).append('\n');
            }
        });
        Path data = dir.resolve("data.jsonl");
        if (!Files.exists(data)) {
            Files.writeString(data, stories(40));
        }
        Path recipe = dir.resolve(name);
        Files.writeString(recipe, text.toString(), StandardCharsets.UTF_8);
        return recipe;
    }

    static Map<String, String> with(Map<String, String> keys, String... pairs) {
        Map<String, String> copy = new LinkedHashMap<>(keys);
        for (int i = 0; i < pairs.length; i += 2) {
            copy.put(pairs[i], pairs[i + 1]);
        }
        return copy;
    }

    /** The first {@code n} quickstart stories as JSONL. */
    static String stories(int n) throws IOException {
        List<String> lines = Files.readAllLines(Runner.repoRoot().resolve("configs/data/quickstart.jsonl"));
        return String.join("\n", lines.subList(0, n)) + "\n";
    }

    /**
     * A copy, at {@code target}, of the output folder of a finished {@link #sft()} run of two steps (checkpoints 1
     * and 2) made from a recipe in {@code target}'s grandparent (the case folder); the run is made once per suite.
     */
    static synchronized Path finishedRun(Path target) throws Exception {
        if (finishedRun == null) {
            Path dir = Files.createTempDirectory("reliability-fixture");
            Path work = Files.createDirectories(dir.resolve("work"));
            Path recipe = recipe(dir, sft());
            Process p = Runner.start(work, List.of(recipe.toString(), "max_steps=2", "output_dir=out"),
                    dir.resolve("fixture.log"));
            if (!p.waitFor(Case.TRAIN_SECONDS, TimeUnit.SECONDS) || p.exitValue() != 0) {
                p.destroyForcibly();
                throw new IllegalStateException("the fixture run failed: "
                        + Files.readString(dir.resolve("fixture.log.err")));
            }
            finishedRun = work.resolve("out");
        }
        copyTree(finishedRun, target);
        return target;
    }

    private static Path finishedFsdpRun;

    /**
     * A copy, at {@code target}, of the output folder of a finished fsdp run (one rank) of {@link #sft()}: two
     * steps, the worker's checkpoints 1 and 2 with their {@code dcp/} shards; made once per suite.
     */
    static synchronized Path finishedFsdpRun(Path target) throws Exception {
        if (finishedFsdpRun == null) {
            Path dir = Files.createTempDirectory("reliability-fsdp-fixture");
            Path work = Files.createDirectories(dir.resolve("work"));
            Path recipe = recipe(dir, sft());
            Process p = Runner.start(work, List.of(recipe.toString(), "max_steps=2", "output_dir=out", "backend=fsdp",
                    "--nproc-per-node", "1"), dir.resolve("fixture.log"));
            if (!p.waitFor(Case.FSDP_SECONDS, TimeUnit.SECONDS) || p.exitValue() != 0) {
                p.destroyForcibly();
                throw new IllegalStateException("the fsdp fixture run failed: "
                        + Files.readString(dir.resolve("fixture.log.out")) + Files.readString(dir.resolve("fixture.log.err")));
            }
            finishedFsdpRun = work.resolve("out");
        }
        copyTree(finishedFsdpRun, target);
        return target;
    }

    static void copyTree(Path from, Path to) throws IOException {
        try (Stream<Path> walk = Files.walk(from)) {
            for (Path source : walk.toList()) {
                Path destination = to.resolve(from.relativize(source).toString());
                if (Files.isDirectory(source)) {
                    Files.createDirectories(destination);
                } else {
                    Files.copy(source, destination, StandardCopyOption.REPLACE_EXISTING);
                }
            }
        }
    }

    static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(root)) {
            for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(p);
            }
        }
    }

    static List<String> args(Path recipe, String... more) {
        List<String> args = new ArrayList<>();
        args.add(recipe.toString());
        args.addAll(List.of(more));
        return args;
    }
}
