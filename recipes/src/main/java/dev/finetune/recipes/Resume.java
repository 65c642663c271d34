package dev.finetune.recipes;

import java.nio.file.Path;

/**
 * {@code resume_from_checkpoint} with {@code auto_resume_from_checkpoints}: start fresh, from the newest complete
 * checkpoint in {@code output_dir}, or from a named checkpoint folder.
 */
public sealed interface Resume {
    record Fresh() implements Resume {}

    record Newest() implements Resume {}

    /** @param folder as written: absolute, or relative to {@code output_dir} (else to the working directory) */
    record From(Path folder) implements Resume {}
}
