package dev.finetune.trainers.train.output;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import dev.finetune.adapters.io.AtomicFiles;
import java.io.BufferedWriter;
import java.io.Closeable;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * {@code metrics.jsonl}: one JSON object per line, under the Hugging Face Trainer's names, as its
 * {@code log_history} holds them: one line per {@code logging_steps} optimizer steps, and for every evaluation
 * (step 0's included) and the last step. The run's summary goes to {@link TrainResults}.
 *
 * <p>On resume the lines after the checkpoint's step are dropped (they belong to the lost steps, and a kill may
 * have cut the last one in half), so the file reads as if the run had never stopped.
 *
 * <p>With {@code use_tensorboard} every line also goes to a {@link TensorBoardLog}, so the two never disagree.
 */
public final class MetricsLog implements Closeable {
    public static final String FILE = "metrics.jsonl";
    private static final Gson GSON = new GsonBuilder().serializeNulls().create();

    private final Path file;
    private final BufferedWriter out;
    private final TensorBoardLog events;

    private MetricsLog(Path file, BufferedWriter out, TensorBoardLog events) {
        this.file = file;
        this.out = out;
        this.events = events;
    }

    /** A fresh log: an existing file is replaced. */
    public static MetricsLog start(Path outputDir) {
        return start(outputDir, false);
    }

    /** @param tensorBoard also write a TensorBoard event file ({@code use_tensorboard}) */
    public static MetricsLog start(Path outputDir, boolean tensorBoard) {
        return open(outputDir, List.of(), tensorBoard);
    }

    /** Continues the log of a run resumed after step {@code step}: keeps the complete lines up to it. */
    public static MetricsLog resume(Path outputDir, long step) {
        return resume(outputDir, step, false);
    }

    /**
     * @param tensorBoard also write a TensorBoard event file, a new one as HF's resumed runs do (TensorBoard shows
     *     the runs of one {@code runs/} folder side by side)
     */
    public static MetricsLog resume(Path outputDir, long step, boolean tensorBoard) {
        List<String> kept = new ArrayList<>();
        for (JsonObject line : read(outputDir.resolve(FILE))) {
            if (line.has("step") && line.get("step").getAsLong() <= step) {
                kept.add(line.toString());
            }
        }
        return open(outputDir, kept, tensorBoard);
    }

    private static MetricsLog open(Path outputDir, List<String> keptLines, boolean tensorBoard) {
        Path file = outputDir.resolve(FILE);
        try {
            AtomicFiles.write(file, rewritten -> Files.write(rewritten, keptLines, StandardCharsets.UTF_8));
            BufferedWriter out = Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.APPEND);
            return new MetricsLog(file, out, tensorBoard ? TensorBoardLog.open(outputDir) : null);
        } catch (IOException e) {
            throw new UncheckedIOException("could not open " + file, e);
        }
    }

    /**
     * Appends one line and flushes it, so a kill loses at most the line being written. A NaN or infinite value
     * is written as {@code null}: JSON has no such numbers, and every line must parse.
     */
    public void write(Map<String, Object> metrics) {
        JsonObject line = new JsonObject();
        metrics.forEach((key, value) -> line.add(key, value instanceof Number n && !Double.isFinite(n.doubleValue())
                ? JsonNull.INSTANCE : GSON.toJsonTree(value)));
        try {
            out.write(GSON.toJson(line));
            out.write('\n');
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException("could not write " + file, e);
        }
        if (events != null && metrics.get("step") instanceof Number step) {
            events.scalars(step.longValue(), metrics);
        }
    }

    /**
     * The run's summary at its last step: {@link TrainResults} holds it; TensorBoard gets it as HF's last log
     * ({@code train/train_runtime}, {@code train/train_loss}, ...).
     */
    public void summary(long step, Map<String, Object> summary) {
        if (events != null) {
            events.scalars(step, summary);
        }
    }

    public Path file() {
        return file;
    }

    /** Every complete line of {@code file}; a half-written last line is skipped. */
    public static List<JsonObject> read(Path file) {
        List<JsonObject> lines = new ArrayList<>();
        if (!Files.isRegularFile(file)) {
            return lines;
        }
        try {
            for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
                try {
                    if (!line.isBlank()) {
                        lines.add(JsonParser.parseString(line).getAsJsonObject());
                    }
                } catch (JsonParseException | IllegalStateException e) {
                    // a line cut short by a kill: its step is replayed after resume
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("could not read " + file, e);
        }
        return lines;
    }

    @Override
    public void close() {
        try (TensorBoardLog closing = events) {
            out.close();
        } catch (IOException e) {
            throw new UncheckedIOException("could not close " + file, e);
        }
    }
}
