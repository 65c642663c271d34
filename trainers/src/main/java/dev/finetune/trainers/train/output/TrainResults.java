package dev.finetune.trainers.train.output;

import com.google.gson.GsonBuilder;
import dev.finetune.adapters.io.AtomicFiles;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * {@code train_results.json}: the run's summary as the Hugging Face example scripts save it
 * ({@code trainer.save_metrics("train", ...)}): {@code train_runtime}, {@code train_samples_per_second},
 * {@code train_steps_per_second}, {@code train_loss}, {@code total_flos}, {@code epoch}.
 */
public final class TrainResults {
    public static final String FILE = "train_results.json";

    private TrainResults() {}

    /**
     * The Hugging Face Trainer's closing log entry, the same on either backend (a resumed run counts its own steps,
     * samples and time).
     *
     * @param epoch the epoch reached at {@code step}
     * @param seconds this run's training time
     * @param stepsRun optimizer steps this run took
     * @param samples examples those steps trained on ({@link dev.finetune.trainers.train.Batch#samples}), over the
     *     whole global batch
     * @param lossSum the sum of those steps' losses: {@code train_loss} is their mean
     * @param numTokens every real token trained on so far, a resumed run's included
     * @param parameterCount what {@code total_flos} counts ({@link #totalFlos})
     */
    public static Map<String, Object> summary(long step, double epoch, double seconds, long stepsRun, long samples,
            double lossSum, long numTokens, long parameterCount) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("step", step);
        line.put("epoch", epoch);
        line.put("train_runtime", seconds);
        line.put("train_samples_per_second", samples / seconds);
        line.put("train_steps_per_second", stepsRun / seconds);
        line.put("train_loss", lossSum / stepsRun);
        line.put("total_flos", totalFlos(numTokens, parameterCount));
        line.put("num_tokens", numTokens);
        return line;
    }

    /**
     * HF's {@code total_flos}: {@code 6 × tokens × parameters}, the parameters being those outside the embedding
     * table (frozen ones and adapters included), over every token trained on so far.
     */
    public static double totalFlos(long numTokens, long parameterCount) {
        return 6.0 * numTokens * parameterCount;
    }

    /** Replaces the file whole (written beside it, then renamed). */
    public static void write(Path outputDir, Map<String, Object> summary) {
        Path file = outputDir.resolve(FILE);
        try {
            AtomicFiles.writeString(file, new GsonBuilder().setPrettyPrinting().serializeSpecialFloatingPointValues()
                    .create().toJson(summary) + "\n");
        } catch (IOException e) {
            throw new UncheckedIOException("could not write " + file, e);
        }
    }
}
