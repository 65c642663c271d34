package dev.finetune.cli.reliability;

import static dev.finetune.cli.reliability.Case.Kind.DATA_LOSS;
import static dev.finetune.cli.reliability.Fixtures.args;
import static dev.finetune.cli.reliability.Fixtures.recipe;
import static dev.finetune.cli.reliability.Fixtures.sft;
import static dev.finetune.cli.reliability.Fixtures.with;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.trainers.train.output.MetricsLog;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** An output folder belongs to one run: inputs, foreign files, earlier runs and live runs are never overwritten. */
final class DataLossCases {
    private DataLossCases() {}

    static List<Case> all() {
        return List.of(
                Case.refused("output_dir = base_model folder", DATA_LOSS, "is the run's input", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    Path recipe = recipe(dir, with(Fixtures.full(), "base_model", model.toString()));
                    return Case.Invocation.of(recipe.toString(), "output_dir=" + model);
                }),
                Case.refused("output_dir links to base_model", DATA_LOSS, "is the run's input", dir -> {
                    Path model = dir.resolve("model");
                    Fixtures.copyTree(Fixtures.model(), model);
                    Files.createSymbolicLink(dir.resolve("work/link"), model);
                    Path recipe = recipe(dir, with(Fixtures.full(), "base_model", model.toString()));
                    return Case.Invocation.of(recipe.toString(), "output_dir=link");
                }),
                Case.refused("output_dir holds the dataset", DATA_LOSS, "holds the run's input", dir -> {
                    Path recipe = recipe(dir, sft());
                    return Case.Invocation.of(recipe.toString(), "output_dir=" + dir, "overwrite_output_dir=true");
                }),
                Case.refused("output_dir = lora_model_dir", DATA_LOSS, "lora_model_dir", dir -> {
                    Path earlier = Fixtures.finishedRun(dir.resolve("earlier"));
                    Path recipe = recipe(dir, with(sft(), "lora_model_dir", earlier.toString()));
                    return Case.Invocation.of(recipe.toString(), "output_dir=" + earlier, "overwrite_output_dir=true");
                }),
                Case.refused("output_dir is a file", DATA_LOSS, "is a file", dir -> {
                    Files.writeString(dir.resolve("work/notes.txt"), "mine\n");
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "output_dir=notes.txt");
                }),
                Case.refused("output_dir holds foreign files", DATA_LOSS, "not written by finetune", dir -> {
                    foreignFiles(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString());
                }),
                // overwrite_output_dir deletes only what a run's finetune-run.json records as its own (#26)
                Case.refused("foreign files + overwrite_output_dir", DATA_LOSS, "not written by finetune", dir -> {
                    foreignFiles(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "overwrite_output_dir=true");
                }),
                Case.refused("overwrite_output_dir on a folder of the user's", DATA_LOSS, "thesis.txt", dir -> {
                    Path mine = Files.createDirectories(dir.resolve("work/userdir"));
                    Files.writeString(mine.resolve("thesis.txt"), "chapter 1\n");
                    Files.createDirectories(mine.resolve("photos"));
                    Files.write(mine.resolve("photos/cat.jpg"), new byte[] {(byte) 0xff, (byte) 0xd8, 1, 2});
                    Files.createDirectories(mine.resolve(".git/refs"));
                    Files.writeString(mine.resolve(".git/HEAD"), "ref: refs/heads/main\n");
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "output_dir=./userdir",
                            "overwrite_output_dir=true");
                }),
                Case.refused("overwrite a finished run that holds files of the user's", DATA_LOSS,
                        "overwrite_output_dir deletes only a run's own files: notes.md, photos/", dir -> {
                            Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                            Files.writeString(out.resolve("notes.md"), "# what I tried\n");
                            Files.createDirectories(out.resolve("photos"));
                            Files.writeString(out.resolve("photos/plot.txt"), "x\n");
                            return Case.Invocation.of(recipe(dir, sft()).toString(), "overwrite_output_dir=true");
                        }),
                Case.refused("resume an fsdp run with backend=single", DATA_LOSS, "written by the fsdp worker", dir -> {
                    Fixtures.finishedFsdpRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3",
                            "resume_from_checkpoint=true");
                }),
                Case.refused("resume an fsdp checkpoint by name with backend=single", DATA_LOSS,
                        "written by the fsdp worker", dir -> {
                            Fixtures.finishedFsdpRun(dir.resolve("work/out"));
                            return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3",
                                    "resume_from_checkpoint=checkpoint-2");
                        }),
                Case.refused("resume a single run with backend=fsdp", DATA_LOSS, "written by the single-device trainer",
                        dir -> {
                            Fixtures.finishedRun(dir.resolve("work/out"));
                            return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3", "backend=fsdp",
                                    "resume_from_checkpoint=true");
                        }).fsdp(),
                Case.refused("rerun into a finished run", DATA_LOSS, "already holds an earlier run", dir -> {
                    Fixtures.finishedRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString());
                }),
                Case.works("resume a finished run, same recipe", DATA_LOSS, "resumed from", dir -> {
                    Fixtures.finishedRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "max_steps=3",
                            "resume_from_checkpoint=true").writing(dir.resolve("work/out"));
                }).training().then((dir, outcome) -> {
                    List<Integer> steps = MetricsLog.read(dir.resolve("work/out").resolve(MetricsLog.FILE)).stream()
                            .map(line -> line.get("step").getAsInt()).toList();
                    assertEquals(List.of(0, 1, 2, 3), steps);
                }),
                Case.works("overwrite a finished run", DATA_LOSS, "saved adapter_model.safetensors", dir -> {
                    Fixtures.finishedRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "overwrite_output_dir=true")
                            .writing(dir.resolve("work/out"));
                }).training().then((dir, outcome) -> {
                    assertFalse(Files.exists(dir.resolve("work/out/checkpoint-2")), "the old run's checkpoint is left");
                    assertEquals(2, MetricsLog.read(dir.resolve("work/out").resolve(MetricsLog.FILE)).size(),
                            "the old run's metrics are mixed in");
                }),
                Case.refused("resume another recipe's run", DATA_LOSS, "lora_r: 8 → 4", dir -> {
                    Fixtures.finishedRun(dir.resolve("work/out"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "lora_r=4", "resume_from_checkpoint=true");
                }),
                Case.refused("resume a run without checkpoints of another recipe", DATA_LOSS, "lora_r: 8 → 4", dir -> {
                    Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                    Fixtures.deleteTree(out.resolve("checkpoint-1"));
                    Fixtures.deleteTree(out.resolve("checkpoint-2"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "lora_r=4", "resume_from_checkpoint=true");
                }),
                Case.works("same recipe after an attempt that saved nothing", DATA_LOSS, "saved adapter", dir -> {
                    Path out = Fixtures.finishedRun(dir.resolve("work/out"));
                    Fixtures.deleteTree(out.resolve("checkpoint-1"));
                    Fixtures.deleteTree(out.resolve("checkpoint-2"));
                    Files.delete(out.resolve("adapter_model.safetensors"));
                    return Case.Invocation.of(recipe(dir, sft()).toString()).writing(out);
                }).training(),
                liveRunHoldsTheLock());
    }

    /** A second run on a folder a live run writes is refused (an OS lock), and the first run is unharmed. */
    private static Case liveRunHoldsTheLock() {
        Process[] first = new Process[1];
        return Case.refused("second live run on the same folder", DATA_LOSS, "another finetune run", dir -> {
            Path recipe = recipe(dir, sft());
            Path out = dir.resolve("work/out");
            first[0] = Runner.start(dir.resolve("work"), args(recipe, "max_steps=400", "save_steps=1000"),
                    dir.resolve("first.log"));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Case.TRAIN_SECONDS);
            while (!Files.exists(out.resolve("recipe.resolved.yaml"))) {
                if (!first[0].isAlive() || System.nanoTime() > deadline) {
                    throw new IllegalStateException("the first run did not start: "
                            + Files.readString(dir.resolve("first.log.err")));
                }
                Thread.sleep(20);
            }
            // the first run goes on writing its own log while the second is checked: those files are the
            // harness's, not the user's
            return Case.Invocation.of(recipe.toString(), "resume_from_checkpoint=true")
                    .writing(out, dir.resolve("first.log.out"), dir.resolve("first.log.err"))
                    .finallyDo(() -> {
                        first[0].destroyForcibly();
                        try {
                            first[0].waitFor(30, TimeUnit.SECONDS);
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    });
        });
    }

    /** What a user may keep in a folder they then name as output_dir by mistake. */
    static void foreignFiles(Path out) throws Exception {
        Files.createDirectories(out.resolve("checkpoint-2"));
        Files.writeString(out.resolve("checkpoint-2/keep.txt"), "mine\n");
        Files.writeString(out.resolve("adapter_config.json"), "{\"r\": 64}\n");
        Files.writeString(out.resolve("metrics.jsonl"), "{\"step\": 1}\n");
        Files.writeString(out.resolve("notes.md"), "# my notes\n");
    }
}
