package dev.finetune.trainers.backend;

import dev.finetune.adapters.io.AtomicFiles;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;

/**
 * The files an output folder gets before the first step: the resolved recipe (what exactly ran) and the
 * tokenizer, so the folder alone is enough for {@code generate} and {@code merge-lora}.
 */
public final class RunFiles {
    public static final String RESOLVED_RECIPE = "recipe.resolved.yaml";
    /** The tokenizer files Hugging Face loaders look for, copied when the model has them. */
    public static final List<String> TOKENIZER_FILES = List.of("tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "chat_template.jinja", "tokenizer.model");

    private RunFiles() {}

    public static void start(Path outputDir, ValidatedRecipe recipe, Path tokenizerDir) {
        try {
            Files.createDirectories(outputDir);
            AtomicFiles.writeString(outputDir.resolve(RESOLVED_RECIPE), recipe.flatten(outputDir));
            copyTokenizer(tokenizerDir, outputDir);
        } catch (IOException e) {
            throw new UserError(outputDir.toString(), "cannot write to output_dir: " + e.getMessage(),
                    "check that output_dir is writable and the disk has space", e);
        }
    }

    /** Copies whichever of {@link #TOKENIZER_FILES} {@code from} holds. */
    public static void copyTokenizer(Path from, Path to) throws IOException {
        for (String name : TOKENIZER_FILES) {
            Path source = from.resolve(name);
            if (Files.isRegularFile(source)) {
                Files.copy(source, to.resolve(name), StandardCopyOption.REPLACE_EXISTING);
            }
        }
    }
}
