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

    /** A run signalled after its second step stops with a checkpoint, says so, and resumes from it. */
    private static Case signalled(String name, String signal, int exit) {
        return new Case(name, FAULTS, exit, "stopped by SIG" + signal, Case.TRAIN_SECONDS, Case.TRAIN_MB, dir ->
                Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=400", "save_steps=1000")
                        .writing(dir.resolve("work/out"))
                        .whileRunning(child -> {
                            Path metrics = dir.resolve("work/out/metrics.jsonl");
                            while (child.isAlive() && (!Files.exists(metrics) || Files.readAllLines(metrics).size() < 3)) {
                                Thread.sleep(20);
                            }
                            new ProcessBuilder("kill", "-" + signal, Long.toString(child.pid())).start().waitFor();
                        }), (dir, o) -> {
                            assertTrue(o.err().contains("stopped by SIG" + signal + " after step"), o.err());
                            try (Stream<Path> children = Files.list(dir.resolve("work/out"))) {
                                assertEquals(1, children.filter(p -> p.getFileName().toString().startsWith("checkpoint-"))
                                        .count(), "one checkpoint, taken at the signal");
                            }
                        });
    }
}
