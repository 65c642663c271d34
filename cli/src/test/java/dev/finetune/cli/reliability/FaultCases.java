package dev.finetune.cli.reliability;

import static dev.finetune.cli.reliability.Case.Kind.FAULTS;
import static dev.finetune.cli.reliability.Fixtures.recipe;
import static dev.finetune.cli.reliability.Fixtures.sft;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/** Signals, full disks and kills: the user's state survives, and the run says what happened. */
final class FaultCases {
    private FaultCases() {}

    static List<Case> all() {
        return List.of(
                signalled("SIGTERM mid-run saves a checkpoint", "TERM", 143),
                signalled("SIGINT mid-run saves a checkpoint", "INT", 130),
                // #26: a closed terminal or session, and the fsdp backend, stop as the single backend does
                signalled("SIGHUP mid-run saves a checkpoint", "HUP", 129),
                signalled("SIGTERM mid fsdp run saves a checkpoint", "TERM", 143, false, "backend=fsdp",
                        "--nproc-per-node", "2").fsdp(),
                signalled("Ctrl-C (SIGINT to the group) mid fsdp run saves a checkpoint", "INT", 130, true,
                        "backend=fsdp", "--nproc-per-node", "2").fsdp(),
                signalled("SIGHUP mid fsdp run saves a checkpoint", "HUP", 129, false, "backend=fsdp",
                        "--nproc-per-node", "1").fsdp(),
                new Case("two SIGTERMs before any checkpoint", FAULTS, 143, "before this run saved any checkpoint",
                        Case.TRAIN_SECONDS, Case.TRAIN_MB, dir -> Case.Invocation.of(recipe(dir, sft()).toString(),
                                "max_steps=400", "save_steps=1000").writing(dir.resolve("work/out"))
                                .whileRunning(child -> {
                                    Path metrics = dir.resolve("work/out/metrics.jsonl");
                                    while (child.isAlive() && !Files.exists(metrics)) {
                                        Thread.sleep(20);
                                    }
                                    for (int i = 0; i < 2; i++) {
                                        new ProcessBuilder("kill", "-TERM", Long.toString(child.pid())).start().waitFor();
                                        Thread.sleep(200);
                                    }
                                }), (dir, o) -> assertTrue(o.err().contains("before this run saved any checkpoint")
                                        && !o.err().contains("is intact"), o.err())),
                new Case("SIGSTOP on one fsdp rank: the collective times out", FAULTS, 1, "rank", Case.FSDP_SECONDS,
                        Case.TRAIN_MB, dir -> Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=400",
                                "save_steps=1000", "backend=fsdp", "--nproc-per-node", "2", "ddp_timeout=20")
                                .writing(dir.resolve("work/out"))
                                .whileRunning(child -> {
                                    Path metrics = dir.resolve("work/out/metrics.jsonl");
                                    while (child.isAlive() && (!Files.exists(metrics)
                                            || Files.readAllLines(metrics).size() < 2)) {
                                        Thread.sleep(20);
                                    }
                                    // the second rank: the newest python process under the launcher
                                    ProcessHandle rank = child.descendants()
                                            .filter(h -> h.info().commandLine().orElse("").contains("finetune_worker"))
                                            .max(java.util.Comparator.comparingLong(ProcessHandle::pid)).orElseThrow();
                                    new ProcessBuilder("kill", "-STOP", Long.toString(rank.pid())).start().waitFor();
                                }), (dir, o) -> assertTrue(o.err().contains("error: run failed: ")
                                        && o.err().toLowerCase(java.util.Locale.ROOT).contains("time"), o.err())),
                Case.refused("disk full during a checkpoint", FAULTS, "could not save checkpoint-3", dir -> {
                    Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3",
                            "resume_from_checkpoint=true").writing(out).fileSizeLimit(300);
                }).training().then((dir, o) -> {
                    Path out = dir.resolve("work/out");
                    assertTrue(Files.isRegularFile(out.resolve("checkpoint-2/checksums.sha256")), "checkpoint-2 lost");
                    assertFalse(Files.exists(out.resolve("checkpoint-3")));
                    try (Stream<Path> children = Files.list(out)) {
                        assertEquals(List.of(), children.map(p -> p.getFileName().toString())
                                .filter(n -> n.startsWith(".tmp-") || n.startsWith(".old-")).toList(), "temporaries left");
                    }
                }),
                Case.works("kill -9 mid-run, then resume", FAULTS, "resumed from", dir -> {
                    Path recipe = recipe(dir, sft());
                    Path out = dir.resolve("work/out");
                    Process first = Runner.start(dir.resolve("work"), Fixtures.args(recipe, "max_steps=40"),
                            dir.resolve("first.log"));
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Case.TRAIN_SECONDS);
                    while (!Files.isRegularFile(out.resolve("checkpoint-2/finetune_state.json"))) {
                        if (!first.isAlive() || System.nanoTime() > deadline) {
                            first.destroyForcibly();
                            throw new IllegalStateException("no checkpoint before the kill");
                        }
                        Thread.sleep(10);
                    }
                    first.destroyForcibly();
                    first.waitFor(30, TimeUnit.SECONDS);
                    return Case.Invocation.of(recipe.toString(), "max_steps=4", "resume_from_checkpoint=true")
                            .writing(out);
                }).training().then((dir, o) -> assertEquals(List.of(0, 1, 2, 3, 4),
                        CorruptionCases.steps(dir.resolve("work/out")).subList(0, 5))));
    }

    private static Case signalled(String name, String signal, int exit) {
        return signalled(name, signal, exit, false);
    }

    /**
     * A run signalled after its second step stops at the next step boundary with a checkpoint, says so, and leaves
     * no temporary checkpoint. {@code group}: the signal goes to the run's whole process group, as Ctrl-C in a
     * terminal sends it.
     */
    private static Case signalled(String name, String signal, int exit, boolean group, String... more) {
        return new Case(name, FAULTS, exit, "stopped by SIG" + signal, Case.TRAIN_SECONDS, Case.TRAIN_MB, dir -> {
            Case.Invocation run = Case.Invocation.of(Fixtures.args(recipe(dir, sft()), concat(
                    new String[] {"max_steps=400", "save_steps=1000"}, more)).toArray(String[]::new))
                    .writing(dir.resolve("work/out"))
                    .whileRunning(child -> {
                        Path metrics = dir.resolve("work/out/metrics.jsonl");
                        while (child.isAlive() && (!Files.exists(metrics) || Files.readAllLines(metrics).size() < 3)) {
                            Thread.sleep(20);
                        }
                        new ProcessBuilder("kill", "-" + signal, "--", (group ? "-" : "") + child.pid()).start()
                                .waitFor();
                    });
            return group ? run.inOwnSession() : run;
        }, (dir, o) -> {
            assertTrue(o.err().contains("stopped by SIG" + signal + " after step"), o.err());
            try (Stream<Path> children = Files.list(dir.resolve("work/out"))) {
                List<String> names = children.map(p -> p.getFileName().toString()).toList();
                assertEquals(1, names.stream().filter(n -> n.startsWith("checkpoint-")).count(),
                        "one checkpoint, taken at the signal: " + names);
                assertEquals(List.of(), names.stream().filter(n -> n.startsWith(".tmp-")).toList(),
                        "a temporary checkpoint left");
            }
        });
    }

    private static String[] concat(String[] a, String[] b) {
        String[] all = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, all, a.length, b.length);
        return all;
    }
}
