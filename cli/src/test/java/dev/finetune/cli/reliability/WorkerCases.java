package dev.finetune.cli.reliability;

import static dev.finetune.cli.reliability.Case.Kind.BOUNDS;
import static dev.finetune.cli.reliability.Case.Kind.UNTRUSTED;
import static dev.finetune.cli.reliability.Fixtures.recipe;
import static dev.finetune.cli.reliability.Fixtures.sft;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.stream.Stream;

/**
 * The fsdp worker runs Python: code is only ever loaded from its own copy, never from the folders a user or a shared
 * recipe controls, and a checkpoint folder never makes it unpickle anything; its interpreter is bounded in time and
 * output.
 */
final class WorkerCases {
    private WorkerCases() {}

    static List<Case> all() {
        return List.of(
                Case.works("planted modules in the working and recipe folders (fsdp)", UNTRUSTED, "saved", dir -> {
                    plant(dir.resolve("work"), dir);
                    plant(dir, dir);
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "backend=fsdp", "--nproc-per-node", "1")
                            .writing(dir.resolve("work/out"));
                }).fsdp().then((dir, o) -> assertFalse(Files.exists(dir.resolve("PWNED")),
                        "a planted module ran: " + readQuietly(dir.resolve("PWNED")))),
                Case.works("planted module in output_dir's worker folder (fsdp resume)", UNTRUSTED, "resumed from",
                        dir -> {
                            Path out = Fixtures.finishedFsdpRun(dir.resolve("work/out"));
                            plant(out.resolve("worker"), dir);
                            return Case.Invocation.of(recipe(dir, sft()).toString(), "backend=fsdp",
                                    "--nproc-per-node", "1", "max_steps=3", "resume_from_checkpoint=true")
                                    .writing(out);
                        }).fsdp().then((dir, o) -> assertFalse(Files.exists(dir.resolve("PWNED")),
                                "a planted module ran: " + readQuietly(dir.resolve("PWNED")))),
                Case.works("crafted dcp/.metadata with its checksum: never unpickled", UNTRUSTED,
                        "resuming from checkpoint-1 instead", dir -> {
                            Path out = Fixtures.finishedFsdpRun(dir.resolve("work/out"));
                            Files.write(out.resolve("checkpoint-2/dcp/.metadata"), systemCall("touch "
                                    + dir.resolve("PWNED")));
                            regenerateChecksums(out.resolve("checkpoint-2"));
                            return Case.Invocation.of(recipe(dir, sft()).toString(), "backend=fsdp",
                                    "--nproc-per-node", "1", "max_steps=3", "resume_from_checkpoint=true")
                                    .writing(out);
                        }).fsdp().then((dir, o) -> assertFalse(Files.exists(dir.resolve("PWNED")),
                                "the crafted metadata ran its command")),
                Case.refused("crafted dcp/.metadata named as the checkpoint", UNTRUSTED, "dcp/.metadata", dir -> {
                    Path out = Fixtures.finishedFsdpRun(dir.resolve("work/out"));
                    Files.write(out.resolve("checkpoint-2/dcp/.metadata"), systemCall("touch " + dir.resolve("PWNED")));
                    regenerateChecksums(out.resolve("checkpoint-2"));
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "backend=fsdp", "--nproc-per-node", "1",
                            "max_steps=3", "resume_from_checkpoint=checkpoint-2");
                }).fsdp().then((dir, o) -> assertFalse(Files.exists(dir.resolve("PWNED")),
                        "the crafted metadata ran its command")),
                Case.refused("fsdp checkpoint without checksums.sha256: refused", UNTRUSTED,
                        "checkpoint-2 has no checksums.sha256", dir -> {
                            Path out = Fixtures.finishedFsdpRun(dir.resolve("work/out"));
                            Files.delete(out.resolve("checkpoint-2/checksums.sha256"));
                            return Case.Invocation.of(recipe(dir, sft()).toString(), "backend=fsdp",
                                    "--nproc-per-node", "1", "max_steps=3", "resume_from_checkpoint=true")
                                    .writing(out);
                        }).fsdp(),
                Case.refused("fsdp interpreter that hangs at start", BOUNDS, "did not answer", dir -> {
                    Path python = script(dir, "hang", "#!/bin/sh\nexec sleep 600\n");
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "backend=fsdp", "--python",
                            python.toString()).withEnv("FINETUNE_PYTHON_CHECK_SECONDS", "5");
                }),
                Case.refused("fsdp interpreter that floods its output", BOUNDS, "printed more than", dir -> {
                    Path python = script(dir, "flood", "#!/bin/sh\nexec yes 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'\n");
                    return Case.Invocation.of(recipe(dir, sft()).toString(), "backend=fsdp", "--python",
                            python.toString());
                }));
    }

    /**
     * Files named like modules the worker and torchrun import, in {@code folder}; each, if ever imported, leaves
     * {@code caseDir}/PWNED naming itself and fails the import.
     */
    static void plant(Path folder, Path caseDir) throws Exception {
        Files.createDirectories(folder.resolve("finetune_worker"));
        for (String module : List.of("torch.py", "peft.py", "transformers.py", "safetensors.py",
                "finetune_worker/__init__.py", "finetune_worker/__main__.py")) {
            Files.writeString(folder.resolve(module), "open(" + pythonString(caseDir.resolve("PWNED").toString())
                    + ", 'a').write(" + pythonString(folder.resolve(module) + "\n") + ")\n"
                    + "raise ImportError('shadowed')\n");
        }
    }

    private static String pythonString(String text) {
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'";
    }

    private static String readQuietly(Path file) {
        try {
            return Files.readString(file);
        } catch (Exception e) {
            return "";
        }
    }

    /** A pickle (protocol 2) that calls {@code os.system(command)} when loaded. */
    static byte[] systemCall(String command) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.writeBytes(new byte[] {(byte) 0x80, 2});
        out.writeBytes("cposix\nsystem\n".getBytes(StandardCharsets.US_ASCII));
        byte[] text = command.getBytes(StandardCharsets.UTF_8);
        out.write('X');
        out.writeBytes(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(text.length).array());
        out.writeBytes(text);
        out.write(0x85); // TUPLE1
        out.write('R'); // REDUCE
        out.write('.'); // STOP
        return out.toByteArray();
    }

    /** What an attacker who rewrote a file does next: a manifest that matches again. */
    static void regenerateChecksums(Path checkpoint) throws Exception {
        List<String> lines = new ArrayList<>();
        try (Stream<Path> walk = Files.walk(checkpoint)) {
            for (Path file : walk.filter(Files::isRegularFile).sorted().toList()) {
                String name = checkpoint.relativize(file).toString();
                if (!name.equals("checksums.sha256")) {
                    lines.add(HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256")
                            .digest(Files.readAllBytes(file))) + "  " + name);
                }
            }
        }
        Files.writeString(checkpoint.resolve("checksums.sha256"), String.join("\n", lines) + "\n");
        assertTrue(Files.size(checkpoint.resolve("checksums.sha256")) > 0);
    }

    static Path script(Path dir, String name, String text) throws Exception {
        Path file = dir.resolve(name);
        Files.writeString(file, text);
        assertTrue(file.toFile().setExecutable(true));
        return file;
    }
}
