package dev.finetune.cli.reliability;

import static dev.finetune.cli.reliability.Case.Kind.UNTRUSTED;
import static dev.finetune.cli.reliability.Fixtures.recipe;
import static dev.finetune.cli.reliability.Fixtures.sft;
import static dev.finetune.cli.reliability.Fixtures.with;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

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

    /**
     * Runs the written sbatch script with stand-ins for Slurm ({@code scontrol}, {@code srun}) and for the launcher
     * (a script recording its arguments): nothing in a value runs, and each value arrives as one argument.
     */
    static void slurmScriptPassesValuesLiterally(Path dir) throws Exception {
        Path bin = Files.createDirectories(dir.resolve("stubs"));
        WorkerCases.script(bin, "scontrol", "#!/bin/sh\necho node001\n");
        // srun: drop its own options, run the rest once as node 0 of 2
        WorkerCases.script(bin, "srun", "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\n"
                + "SLURM_NNODES=2 SLURM_NODEID=0 exec \"$@\"\n");
        Path calls = dir.resolve("calls.txt");
        Path launcher = WorkerCases.script(bin, "launcher", "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '"
                + calls + "'; done\necho --- >> '" + calls + "'\n");
        String script = Files.readString(dir.resolve("work/job.sbatch"));
        String real = Runner.repoRoot().resolve("finetune").toString();
        assertTrue(script.contains(real), script);
        assertTrue(script.contains("\n#SBATCH --cpus-per-task=6\n"), script);
        Path runnable = dir.resolve("job-stubbed.sbatch");
        Files.writeString(runnable, script.replace(real, launcher.toString()));
        ProcessBuilder builder = new ProcessBuilder("bash", runnable.toString()).directory(dir.toFile())
                .redirectErrorStream(true);
        builder.environment().put("PATH", bin + ":" + System.getenv("PATH"));
        builder.environment().put("SLURM_JOB_NODELIST", "node[001-002]");
        builder.environment().put("SLURM_CPUS_ON_NODE", "4");
        Process p = builder.start();
        p.getOutputStream().close();
        String output = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        org.junit.jupiter.api.Assertions.assertEquals(0, p.waitFor(), output);
        assertFalse(Files.exists(dir.resolve("X")), "a command in an override ran: " + script);
        List<String> args = Files.readAllLines(calls);
        assertTrue(args.contains("output_dir=./out/sb$(touch " + dir.resolve("X") + ")"), args.toString());
        assertTrue(args.contains("wandb_name=two words"), args.toString());
        assertTrue(args.containsAll(List.of("--node-rank", "0", "--rdzv-endpoint", "node001:29500")), args.toString());
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
                // #26: a link is judged by what it points at, never by its own name
                Case.refused("base: a .yaml link to a secret", UNTRUSTED, "not a .yaml or .yml file", dir -> {
                    Files.writeString(dir.resolve("shadow"), SECRET + "\n");
                    Files.createSymbolicLink(dir.resolve("common.yaml"), dir.resolve("shadow"));
                    return Case.Invocation.of("validate", recipe(dir, with(sft(), "base", "common.yaml")).toString());
                }).then((dir, o) -> assertFalse(o.err().contains("saltsalt") || o.out().contains("saltsalt"), o.err())),
                Case.refused("validate a folder holding a .yaml link to a secret", UNTRUSTED, "not a .yaml or .yml file",
                        dir -> {
                            Path team = Files.createDirectories(dir.resolve("team"));
                            Files.writeString(dir.resolve("shadow"), SECRET + "\nbob:$6$other$hash:19000:0:99999:7:::\n");
                            Files.createSymbolicLink(team.resolve("shadow.yaml"), dir.resolve("shadow"));
                            recipe(team, sft());
                            return Case.Invocation.of("validate", team.toString(), "--format", "github");
                        }).then((dir, o) -> assertFalse(o.err().contains("saltsalt") || o.out().contains("saltsalt")
                                || o.out().contains("bob:") || o.err().contains("bob:"), o.out() + o.err())),
                Case.works("launch --slurm: overrides reach each node as given", UNTRUSTED, "wrote", dir -> {
                    Path recipe = recipe(dir, with(sft(), "hardware", "{gpus: 2, nodes: 2}", "backend", "fsdp"));
                    return Case.Invocation.of("launch", "--slurm", "--out", "job.sbatch", "--rdzv-endpoint", "x:1",
                            "--cpus-per-task", "6", recipe.toString(),
                            "output_dir=./out/sb$(touch " + dir.resolve("X") + ")", "wandb_name=two words", "seed=7").writing(dir.resolve("work/job.sbatch"));
                }).then((dir, o) -> slurmScriptPassesValuesLiterally(dir)),
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
