package dev.finetune.trainers.backend;

import dev.finetune.recipes.Resume;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;

/**
 * Which backend wrote a checkpoint: each resumes only its own kind (their optimizer state and data position are
 * saved in different forms). Apart from {@link OutputFolder}, which decides whether a run may write into a folder at
 * all, because this is a question about one checkpoint and the backend that would continue it.
 */
public enum CheckpointWriter {
    SINGLE("the single-device trainer (backend: single)", CheckpointStore.STATE),
    FSDP("the fsdp worker (backend: fsdp)", OutputFolder.WORKER_STATE);

    private final String label;
    private final String stateFile;

    CheckpointWriter(String label, String stateFile) {
        this.label = label;
        this.stateFile = stateFile;
    }

    /** The writer of a complete checkpoint folder, or null when it is neither backend's. */
    public static CheckpointWriter of(Path checkpoint) {
        for (CheckpointWriter w : values()) {
            if (Files.isRegularFile(checkpoint.resolve(w.stateFile))) {
                return w;
            }
        }
        return null;
    }

    public String label() {
        return label;
    }

    /**
     * Refuses, before anything is written, a resume that this backend cannot continue: the checkpoint named, or
     * with {@code resume_from_checkpoint: true} the newest complete one of either backend, was written by the other
     * backend. Starting at step 0 instead would overwrite that run's checkpoints and metrics.
     */
    public void requireCanResume(Path folder, Resume resume) {
        Path checkpoint = null;
        if (resume instanceof Resume.From from) {
            Path given = from.folder();
            checkpoint = given.isAbsolute() || Files.isDirectory(given) ? given : folder.resolve(given);
        } else if (resume instanceof Resume.Newest) {
            long newest = -1;
            if (Files.isDirectory(folder)) {
                try (Stream<Path> children = Files.list(folder)) {
                    for (Path child : children.toList()) {
                        String name = child.getFileName().toString();
                        if (name.matches("checkpoint-\\d{1,18}") && of(child) != null
                                && Long.parseLong(name.substring(11)) > newest) {
                            newest = Long.parseLong(name.substring(11));
                            checkpoint = child;
                        }
                    }
                } catch (IOException e) {
                    throw new UserError(folder.toString(), "cannot list output_dir: " + e.getMessage(),
                            "check the folder's permissions");
                }
            }
        }
        CheckpointWriter wrote = checkpoint == null ? null : of(checkpoint);
        if (wrote != null && wrote != this) {
            CheckpointWriter other = wrote;
            throw new UserError(checkpoint.toString(), "this checkpoint was written by " + other.label() + ", and "
                    + label() + " cannot resume it (the optimizer state and data position are saved in "
                    + "another form); starting over would overwrite that run's checkpoints",
                    "resume it with backend: " + (other == FSDP ? "fsdp" : "single") + " and the same recipe, "
                            + "or start this run in another output_dir");
        }
    }
}
