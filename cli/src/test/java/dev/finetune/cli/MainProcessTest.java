package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The real entry point in a child JVM: exit codes, one-line errors without stack traces, nothing written. */
class MainProcessTest {

    record Run(int exit, String out, String err) {}

    static Path repoRoot() {
        for (Path p = Path.of(System.getProperty("user.dir")).toAbsolutePath(); p != null; p = p.getParent()) {
            if (Files.isRegularFile(p.resolve("configs/quickstart.yaml"))) {
                return p;
            }
        }
        throw new IllegalStateException("repository root not found");
    }

    static Run run(Path workDir, String... args) throws IOException, InterruptedException {
        return runWith(workDir, List.of(), args);
    }

    static Run runWith(Path workDir, List<String> jvmOptions, String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dfinetune.home=" + repoRoot()));
        command.addAll(jvmOptions);
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), Main.class.getName()));
        command.addAll(List.of(args));
        Path out = Files.createTempFile("finetune-out", ".txt");
        Path err = Files.createTempFile("finetune-err", ".txt");
        try {
            Process p = new ProcessBuilder(command).directory(workDir.toFile())
                    .redirectOutput(out.toFile()).redirectError(err.toFile()).start();
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "finetune did not finish");
            return new Run(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
        } finally {
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
        }
    }

    static List<Path> listing(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            return s.sorted().toList();
        }
    }

    @Test
    void malformedRecipesExitTwoWithOneLineErrorsAndWriteNothing(@TempDir Path work) throws Exception {
        Path malformed = repoRoot().resolve("recipes/src/test/resources/malformed");
        List<Path> before = listing(malformed);
        for (String name : List.of("typo-top-key.yaml", "unsafe-python-tag.yaml", "empty.yaml", "not-yaml-binary.yaml",
                "cyclic-base-a.yaml", "missing-dataset-file.yaml", "non-integral-batch-size.yaml")) {
            for (String[] args : List.of(new String[] {"validate", malformed.resolve(name).toString()},
                    new String[] {malformed.resolve(name).toString()})) {
                Run r = run(work, args);
                assertEquals(2, r.exit(), name + ": " + r.err());
                assertFalse(r.err().contains("\tat "), name + " printed a stack trace: " + r.err());
                assertFalse(r.err().contains("Exception"), name + ": " + r.err());
                List<String> errors = r.err().lines().filter(l -> l.startsWith("error: ")).toList();
                assertFalse(errors.isEmpty(), name + ": " + r.err());
                for (String line : errors) {
                    assertTrue(line.contains(name) && line.contains("(hint: "), line);
                }
            }
        }
        assertEquals(List.of(work), listing(work), "the working directory was written to");
        assertEquals(before, listing(malformed), "the malformed corpus folder changed");
    }

    @Test
    void aRecipeThatCannotFitIsRefusedBeforeAnythingIsLoadedOrWritten(@TempDir Path work) throws Exception {
        Path recipe = repoRoot().resolve("configs/llama-3.1-8b/qlora-sft.yaml");
        Run r = run(work, recipe.toString(), "hardware.gpu_memory=4GiB", "output_dir=" + work.resolve("run"));
        assertEquals(2, r.exit(), r.err());
        assertTrue(r.out().contains("does not fit"), r.out());
        List<String> errors = r.err().lines().filter(l -> l.startsWith("error: ")).toList();
        assertEquals(1, errors.size(), r.err());
        assertTrue(errors.get(0).contains("qlora-sft.yaml: does not fit") && errors.get(0).contains("(hint: "), errors.get(0));
        assertFalse(r.err().contains("\tat "), r.err());
        assertEquals(List.of(work), listing(work), "a refused recipe wrote to disk");
    }

    @Test
    void validateAndFlatten(@TempDir Path work) throws Exception {
        Path quickstart = repoRoot().resolve("configs/quickstart.yaml");
        Run validate = run(work, "validate", quickstart.toString(), "lora_r=4");
        assertEquals(0, validate.exit(), validate.err());
        assertTrue(validate.out().contains("global 4"), validate.out());

        Run flat = run(work, "validate", "--flatten", quickstart.toString());
        assertEquals(0, flat.exit(), flat.err());
        assertTrue(flat.out().contains("base_model:") && !flat.out().contains("base:"), flat.out());

        Run usage = run(work, "validate");
        assertEquals(2, usage.exit(), usage.err());
        assertEquals(List.of(work), listing(work));
    }

    /**
     * validate must stay a quick command: starting Log4j or the DJL engine costs it most of its half-second budget
     * (picocli instantiates every subcommand, so a static logger or engine field in any of them is enough).
     */
    @Test
    void validateLoadsNeitherLog4jCoreNorTheEngine(@TempDir Path work) throws Exception {
        Run r = runWith(work, List.of("-Xlog:class+load:stdout"), "validate", repoRoot().resolve("configs/quickstart.yaml").toString());
        assertEquals(0, r.exit(), r.err());
        List<String> heavy = r.out().lines()
                .filter(l -> l.contains("org.apache.logging.log4j.core.") || l.contains(" ai.djl.engine.") || l.contains(" ai.djl.pytorch."))
                .limit(3).toList();
        assertTrue(heavy.isEmpty(), "validate loaded " + heavy);
    }

    /**
     * picocli builds the model of every registered command by reflection, and its own classes cannot be archived for
     * fast start-up; a quick command registers only itself, while help still lists every command.
     */
    @Test
    void validateBuildsOnlyItsOwnCommandAndHelpListsThemAll(@TempDir Path work) throws Exception {
        Run r = runWith(work, List.of("-Xlog:class+load:stdout"), "validate", repoRoot().resolve("configs/quickstart.yaml").toString());
        assertEquals(0, r.exit(), r.err());
        List<String> others = r.out().lines()
                .filter(l -> l.contains(" dev.finetune.cli.BenchTrainCommand ") || l.contains(" dev.finetune.cli.GenerateCommand "))
                .toList();
        assertTrue(others.isEmpty(), "validate loaded " + others);
        for (String quick : Main.QUICK) {
            assertEquals(quick, Main.quick(quick).getAnnotation(picocli.CommandLine.Command.class).name());
            assertTrue(Main.allSubcommands().contains(Main.quick(quick)), quick);
        }
        InProcess.Run help = InProcess.finetune("--help");
        assertEquals(0, help.exit(), help.err());
        for (Class<?> command : Main.allSubcommands()) {
            String name = command.getAnnotation(picocli.CommandLine.Command.class).name();
            assertTrue(help.out().contains("  " + name + " "), name + " missing from\n" + help.out());
        }
    }

    @Test
    void configsListCatAndCopyWithoutClobbering(@TempDir Path work) throws Exception {
        Run ls = run(work, "configs", "ls");
        assertEquals(0, ls.exit(), ls.err());
        for (String name : List.of("quickstart", "llama-3.1-8b/qlora-sft", "qwen2.5-7b/lora-dpo", "llama-3.1-70b/full-fsdp")) {
            assertTrue(ls.out().contains(name), ls.out());
        }
        Run cat = run(work, "configs", "cat", "quickstart");
        assertEquals(Files.readString(repoRoot().resolve("configs/quickstart.yaml")), cat.out());

        Path target = work.resolve("mine.yaml");
        Files.writeString(target, "keep me\n");
        Run refused = run(work, "configs", "cp", "quickstart", target.toString());
        assertEquals(2, refused.exit());
        assertTrue(refused.err().contains("--force"), refused.err());
        assertEquals("keep me\n", Files.readString(target));
        Run forced = run(work, "configs", "cp", "quickstart", target.toString(), "--force");
        assertEquals(0, forced.exit(), forced.err());
        String copy = Files.readString(target);
        assertTrue(copy.startsWith("# Quickstart"), copy);
        // The copy lives elsewhere, so its data and model paths were re-pointed: it validates where it is.
        Run copied = run(work, "validate", target.toString());
        assertEquals(0, copied.exit(), copied.err());
        assertTrue(copied.out().contains("dataset rows: 360"), copied.out());
        assertEquals(2, run(work, "configs", "cat", "no-such-recipe").exit());
    }
}
