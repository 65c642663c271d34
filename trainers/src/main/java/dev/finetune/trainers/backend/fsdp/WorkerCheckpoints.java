package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.Resume;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.backend.OutputFolder;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.checkpoint.Checksums;
import dev.finetune.trainers.train.checkpoint.HfTrainerState;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * The worker's {@code checkpoint-N} folders, seen from the launcher: which one a resume continues, checked against
 * its {@code checksums.sha256} before any rank reads a byte, so a damaged checkpoint is an exit-2 message (or, for
 * {@code resume_from_checkpoint: true}, a fall-back to the newest intact one) instead of a rank's traceback.
 * The worker writes them (finetune_worker/checkpoints.py): HF files, {@code dcp/} shards, {@code worker_state.json}.
 */
final class WorkerCheckpoints {
    private static final org.apache.logging.log4j.Logger LOG =
            org.apache.logging.log4j.LogManager.getLogger(WorkerCheckpoints.class);
    static final String CHECKSUMS = CheckpointStore.CHECKSUMS;
    private static final Pattern NAME = Pattern.compile("checkpoint-(\\d+)");
    /** A manifest line: the worker's own file names, at most one level down (the DCP shards under dcp/). */
    private static final Pattern LINE = Pattern.compile("([0-9a-f]{64})  ((?:dcp/)?[A-Za-z0-9_][A-Za-z0-9._-]*"
            + "|dcp/\\.metadata)");
    private static final int MAX_MANIFEST_BYTES = 1 << 20;

    private WorkerCheckpoints() {}

    /** Complete worker checkpoints of {@code outputDir}, oldest first. */
    static List<Path> complete(Path outputDir) {
        List<Path> found = new ArrayList<>();
        if (!Files.isDirectory(outputDir)) {
            return found;
        }
        try (Stream<Path> children = Files.list(outputDir)) {
            for (Path child : children.toList()) {
                Matcher name = NAME.matcher(child.getFileName().toString());
                if (name.matches() && Files.isRegularFile(child.resolve(OutputFolder.WORKER_STATE))) {
                    found.add(child);
                }
            }
        } catch (IOException e) {
            throw new UserError(outputDir.toString(), "cannot list output_dir: " + e.getMessage(),
                    "check the folder's permissions");
        }
        found.sort(Comparator.comparingLong(p -> Long.parseLong(p.getFileName().toString().substring(11))));
        return found;
    }

    /**
     * The verified checkpoint the run continues, or null to start at step 0: the folder named (absolute, from the
     * working directory, or relative to output_dir), or with {@code resume_from_checkpoint: true} the newest intact
     * one.
     */
    static Path resumeFolder(Resume resume, Path outputDir, java.util.function.Function<Path, String> metadataProblem) {
        if (resume instanceof Resume.From from) {
            Path given = from.folder();
            Path folder = given.isAbsolute() || Files.isDirectory(given) ? given : outputDir.resolve(given);
            if (!Files.isRegularFile(folder.resolve(OutputFolder.WORKER_STATE))) {
                boolean jvm = Files.isRegularFile(folder.resolve(CheckpointStore.STATE));
                throw new UserError("resume_from_checkpoint", folder + (jvm ? " is a checkpoint of the single-device "
                        + "trainer, not of the fsdp worker" : Files.isRegularFile(folder.resolve(HfTrainerState.FILE))
                        ? " is a Hugging Face Trainer checkpoint: it has no " + OutputFolder.WORKER_STATE + " and "
                                + "sharded state to resume from" : " is not a complete fsdp checkpoint (it has no "
                                + OutputFolder.WORKER_STATE + ")"),
                        "to continue from its weights, start a new run with lora_model_dir: " + folder
                                + " (an adapter) or base_model: " + folder + " (a full model)");
            }
            refuseModelOnly(folder);
            verify(folder, metadataProblem);
            return folder.toAbsolutePath();
        }
        if (!(resume instanceof Resume.Newest)) {
            return null;
        }
        List<Path> complete = complete(outputDir);
        List<String> damaged = new ArrayList<>();
        if (!complete.isEmpty()) {
            refuseModelOnly(complete.get(complete.size() - 1));
        }
        for (int i = complete.size() - 1; i >= 0; i--) {
            try {
                verify(complete.get(i), metadataProblem);
                if (!damaged.isEmpty()) {
                    // never silently: the steps since this checkpoint will be trained again
                    LOG.warn("warning: resuming from {} instead: {}", complete.get(i).getFileName(),
                            String.join("; ", damaged));
                }
                return complete.get(i).toAbsolutePath();
            } catch (CheckpointStore.Damaged e) {
                damaged.add(complete.get(i).getFileName() + " is damaged (" + e.getMessage()
                        .replaceFirst("^damaged checkpoint: ", "") + ")");
            }
        }
        if (!damaged.isEmpty()) {
            throw new UserError(outputDir.toString(), "no intact checkpoint to resume from: "
                    + String.join("; ", damaged), "start over with overwrite_output_dir=true, or restore the "
                    + "checkpoints from a copy");
        }
        return null;
    }

    /**
     * A checkpoint saved with {@code save_only_model} holds the weights without the optimizer's state: as with HF's
     * Trainer, training cannot continue from it, only start anew from its weights.
     */
    private static void refuseModelOnly(Path folder) {
        boolean modelOnly;
        try {
            String text = Files.readString(folder.resolve(OutputFolder.WORKER_STATE), StandardCharsets.UTF_8);
            var state = com.google.gson.JsonParser.parseString(text);
            modelOnly = state.isJsonObject() && state.getAsJsonObject().has("model_only")
                    && state.getAsJsonObject().get("model_only").getAsBoolean();
        } catch (IOException | RuntimeException e) {
            return; // unreadable: verify() names the problem with its checksum
        }
        if (modelOnly) {
            throw new UserError("resume_from_checkpoint", folder + " was saved with save_only_model: true: it holds "
                    + "the weights but no optimizer state to continue from", "start a new run from its weights "
                    + "(base_model: " + folder + ", or lora_model_dir: " + folder + " for an adapter), or train with "
                    + "save_only_model: false to be able to resume");
        }
    }

    /**
     * Every file the manifest names has its recorded SHA-256, the files a resume reads are among them, and the DCP
     * metadata reads as plain metadata ({@code metadataProblem}: a manifest proves only that nobody changed a file
     * after the manifest was written, not who wrote it).
     */
    static void verify(Path folder, java.util.function.Function<Path, String> metadataProblem) {
        verify(folder);
        String problem = metadataProblem.apply(folder);
        if (problem != null) {
            throw new CheckpointStore.Damaged(folder, problem);
        }
    }

    /** Every file the manifest names has its recorded SHA-256, and the files a resume reads are among them. */
    static void verify(Path folder) {
        Map<String, String> sums = manifest(folder);
        for (String required : List.of(OutputFolder.WORKER_STATE, "dcp/.metadata", HfTrainerState.FILE)) {
            if (!sums.containsKey(required)) {
                throw new CheckpointStore.Damaged(folder, CHECKSUMS + " does not cover " + required);
            }
        }
        verifyFiles(folder, sums);
    }

    /** Every file the manifest names has its recorded SHA-256 (a save_only_model checkpoint has no DCP state). */
    static void verifyFiles(Path folder) {
        verifyFiles(folder, manifest(folder));
    }

    private static void verifyFiles(Path folder, Map<String, String> sums) {
        for (Map.Entry<String, String> entry : sums.entrySet()) {
            Path file = folder.resolve(entry.getKey());
            if (!Files.isRegularFile(file)) {
                throw new CheckpointStore.Damaged(folder, entry.getKey() + " is missing");
            }
            try {
                if (!Checksums.sha256(file).equals(entry.getValue())) {
                    throw new CheckpointStore.Damaged(folder, entry.getKey() + " does not match its checksum (its "
                            + "bytes changed after it was saved)");
                }
            } catch (IOException e) {
                throw new CheckpointStore.Damaged(folder, entry.getKey() + " is unreadable (" + e.getMessage() + ")");
            }
        }
    }

    private static Map<String, String> manifest(Path folder) {
        Path file = folder.resolve(CHECKSUMS);
        List<String> lines;
        try {
            if (!Files.isRegularFile(file)) {
                throw new Checksums.Unverified(folder, CHECKSUMS);
            }
            if (Files.size(file) > MAX_MANIFEST_BYTES) {
                throw new CheckpointStore.Damaged(folder, CHECKSUMS + " is too large to be a manifest");
            }
            lines = Files.readAllLines(file, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new CheckpointStore.Damaged(folder, CHECKSUMS + " is unreadable (" + e.getMessage() + ")");
        }
        Map<String, String> sums = new LinkedHashMap<>();
        for (String line : lines) {
            if (line.isBlank()) {
                continue;
            }
            Matcher m = LINE.matcher(line);
            if (!m.matches()) {
                throw new CheckpointStore.Damaged(folder, CHECKSUMS + " has a malformed line");
            }
            sums.put(m.group(2), m.group(1));
        }
        return sums;
    }
}
