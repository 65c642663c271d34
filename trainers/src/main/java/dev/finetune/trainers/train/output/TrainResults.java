package dev.finetune.trainers.train.output;

import com.google.gson.GsonBuilder;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Map;

/**
 * {@code train_results.json}: the run's summary as the Hugging Face example scripts save it
 * ({@code trainer.save_metrics("train", ...)}): {@code train_runtime}, {@code train_samples_per_second},
 * {@code train_steps_per_second}, {@code train_loss}, {@code total_flos}, {@code epoch}.
 */
public final class TrainResults {
    public static final String FILE = "train_results.json";

    private TrainResults() {}

    /** Replaces the file whole (written beside it, then renamed). */
    public static void write(Path outputDir, Map<String, Object> summary) {
        Path file = outputDir.resolve(FILE);
        Path temporary = outputDir.resolve("." + FILE + ".tmp");
        try {
            Files.writeString(temporary, new GsonBuilder().setPrettyPrinting().serializeSpecialFloatingPointValues()
                    .create().toJson(summary) + "\n", StandardCharsets.UTF_8);
            Files.move(temporary, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            throw new UncheckedIOException("could not write " + file, e);
        }
    }
}
