package dev.finetune.cli.reliability;

import static dev.finetune.cli.reliability.Case.Kind.UNTRUSTED;
import static dev.finetune.cli.reliability.Fixtures.recipe;
import static dev.finetune.cli.reliability.Fixtures.sft;
import static dev.finetune.cli.reliability.Fixtures.with;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/** Recipes from strangers: no file's contents leak, every recipe-controlled computation is bounded. */
final class UntrustedCases {
    private UntrustedCases() {}

    private static final String SECRET = "root:$6$saltsalt$hashhashhash:19000:0:99999:7:::";

    /** A chat dataset of four rows rendered with {@code template}: training prepares (renders) it first. */
    static Case.Invocation chatTemplate(Path dir, String template) throws Exception {
        Files.writeString(dir.resolve("chat.jsonl"), ("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                + "{\"role\": \"assistant\", \"content\": \"Hello\"}]}\n").repeat(4));
        Path recipe = recipe(dir, with(sft(), "datasets", "\n  - path: chat.jsonl\n    type: chat_template",
                "chat_template_jinja", new com.google.gson.Gson().toJson(template), "val_set_size", "0"));
        return Case.Invocation.of(recipe.toString());
    }

    static List<Case> all() {
        return List.of(
                Case.refused("base: a non-YAML secret file", UNTRUSTED, "must name a .yaml or .yml", dir -> {
                    Files.writeString(dir.resolve("shadow"), SECRET + "\n");
                    return Case.Invocation.of("validate", recipe(dir, with(sft(), "base", "shadow")).toString());
                }).then((dir, o) -> assertFalse(o.err().contains("root:") || o.out().contains("root:"), o.err())),
                Case.refused("base: ../.env", UNTRUSTED, "must name a .yaml or .yml", dir -> {
                    Path inner = Files.createDirectories(dir.resolve("team"));
                    Files.writeString(dir.resolve(".env"), "API_KEY=sk-very-secret\n");
                    return Case.Invocation.of("validate", recipe(inner, with(sft(), "base", "../.env")).toString());
                }).then((dir, o) -> assertFalse(o.err().contains("sk-very-secret"), o.err())),
                Case.refused("base: a folder", UNTRUSTED, "is a folder", dir -> {
                    Files.createDirectories(dir.resolve("common.yaml"));
                    return Case.Invocation.of("validate", recipe(dir, with(sft(), "base", "common.yaml")).toString());
                }),
                Case.refused("validate /dev/zero", UNTRUSTED, "not a regular file", dir ->
                        Case.Invocation.of("validate", "/dev/zero")),
                Case.refused("recipe of 5 MiB", UNTRUSTED, "too large", dir -> {
                    Path big = dir.resolve("big.yaml");
                    Files.writeString(big, "# " + "x".repeat(5 << 20) + "\n");
                    return Case.Invocation.of("validate", big.toString());
                }),
                Case.refused("alias bomb", UNTRUSTED, "alias-bomb.yaml", dir -> Case.Invocation.of("validate",
                        Runner.repoRoot().resolve("recipes/src/test/resources/malformed/alias-bomb.yaml").toString())),
                Case.refused("python object tag", UNTRUSTED, "unsafe-python-tag.yaml", dir -> Case.Invocation.of(
                        "validate", Runner.repoRoot().resolve("recipes/src/test/resources/malformed/unsafe-python-tag.yaml")
                                .toString())),
                Case.refused("config.json num_hidden_layers 1000000", UNTRUSTED, "num_hidden_layers", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    Path config = model.resolve("config.json");
                    Files.writeString(config, Files.readString(config).replace("\"num_hidden_layers\": 5",
                            "\"num_hidden_layers\": 1000000"));
                    return Case.Invocation.of("plan", recipe(dir, with(sft(), "base_model", model.toString())).toString());
                }),
                Case.refused("regex reward with catastrophic backtracking", UNTRUSTED, "catastrophic", dir -> {
                    Files.writeString(dir.resolve("prompts.jsonl"), "{\"prompt\": \"Once\", \"word\": \"cat\"}\n");
                    Path recipe = recipe(dir, with(sft(), "rl", "grpo", "trl", "\n  num_generations: 2\n"
                            + "  max_completion_length: 8\n  reward_funcs:\n    - {name: regex_match, pattern: '(.*a){8}x'}",
                            "datasets", "\n  - path: prompts.jsonl\n    type: passthrough", "val_set_size", "0",
                            "micro_batch_size", "2", "sequence_len", "64", "sample_packing", "false"));
                    return Case.Invocation.of("rewards", recipe.toString(), "--dry-run", "--completion",
                            "a".repeat(60) + "b");
                }),
                Case.refused("chat template string growth", UNTRUSTED, "chat template", dir ->
                        chatTemplate(dir, "{% set s = 'xxxxxxxx' %}{% for i in range(30) %}{% set s = s ~ s %}{% endfor %}"
                                + "{{ s }}{% for m in messages %}{{ m.content }}{% endfor %}")),
                Case.refused("chat template nested loops", UNTRUSTED, "did not finish", dir ->
                        chatTemplate(dir, "{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(10000) %}"
                                + "{% endfor %}{% endfor %}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}")),
                Case.refused("reward command without consent", UNTRUSTED, "--allow-commands", dir -> {
                    Files.writeString(dir.resolve("prompts.jsonl"), "{\"prompt\": \"Once\", \"word\": \"cat\"}\n");
                    Path recipe = recipe(dir, with(sft(), "rl", "grpo", "trl", "\n  num_generations: 2\n"
                            + "  max_completion_length: 8\n  reward_funcs:\n    - {name: judge, command: \"touch pwned\"}",
                            "datasets", "\n  - path: prompts.jsonl\n    type: passthrough", "val_set_size", "0",
                            "micro_batch_size", "2", "sequence_len", "64", "sample_packing", "false"));
                    return Case.Invocation.of("rewards", recipe.toString(), "--dry-run", "--completion", "a cat");
                }).then((dir, o) -> assertFalse(Files.exists(dir.resolve("pwned")), "the command ran")));
    }
}
