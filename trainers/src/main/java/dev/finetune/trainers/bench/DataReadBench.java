package dev.finetune.trainers.bench;

import dev.finetune.recipes.DataFormat;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.recipes.Recipe;
import dev.finetune.trainers.data.DataOptions;
import dev.finetune.trainers.data.DataPipeline;
import dev.finetune.trainers.data.Rows;
import dev.finetune.trainers.hub.DatasetFiles;
import dev.finetune.trainers.text.Tokenizer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Reading speed of the same alpaca rows stored as Parquet and as JSON Lines: rows/s into row objects (what the file
 * readers cost) and into tokenized examples through the SFT pipeline (what a run pays; the tokenizer dominates).
 * Runs alternate between the formats and the median of each is printed: run it alone on the machine.
 *
 * <p>From the repository root: {@code java -cp cli/target/finetune.jar dev.finetune.trainers.bench.DataReadBench DIR
 * [REPEATS] [ROWS] [TOKENIZER_DIR]}. DIR holds {@code rows.parquet} and {@code rows.jsonl}; when it does not, they are
 * written first with ROWS rows (default 1,000,000) by trainers/src/main/python/bench/write_rows.py with the venv's
 * pyarrow, so one command measures.
 */
public final class DataReadBench {
    private DataReadBench() {}

    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        int repeats = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        int rows = args.length > 2 ? Integer.parseInt(args[2]) : 1_000_000;
        // the repository: the working directory, or -Dfinetune.home (as ./finetune sets it)
        Path home = Path.of(System.getProperty("finetune.home", "."));
        Path tokenizerDir = args.length > 3 ? Path.of(args[3]) : home.resolve("configs/models/stories260K");
        if (!Files.isRegularFile(dir.resolve("rows.parquet")) || !Files.isRegularFile(dir.resolve("rows.jsonl"))) {
            Process write = new ProcessBuilder(home.resolve(".venv/bin/python").toString(),
                    home.resolve("trainers/src/main/python/bench/write_rows.py").toString(), Integer.toString(rows),
                    dir.toString()).inheritIO().start();
            if (write.waitFor() != 0) {
                throw new IllegalStateException("write_rows.py failed (run from the repository root, with .venv)");
            }
        }
        List<DataFormat> formats = List.of(DataFormat.PARQUET, DataFormat.JSON);
        for (String stage : List.of("rows", "examples")) {
            List<List<Double>> rates = List.of(new ArrayList<>(), new ArrayList<>());
            for (int r = 0; r < repeats; r++) {
                for (int f = 0; f < formats.size(); f++) {
                    Path file = dir.resolve(formats.get(f) == DataFormat.PARQUET ? "rows.parquet" : "rows.jsonl");
                    rates.get(f).add(stage.equals("rows") ? rowsPerSecond(file, formats.get(f))
                            : examplesPerSecond(file, tokenizerDir));
                }
            }
            for (int f = 0; f < formats.size(); f++) {
                List<Double> sorted = rates.get(f).stream().sorted().toList();
                System.out.printf(Locale.ROOT, "%-8s into %-8s median %,10.0f rows/s  (runs: %s)%n",
                        formats.get(f).key(), stage, sorted.get(sorted.size() / 2), rates.get(f).stream()
                                .map(x -> String.format(Locale.ROOT, "%,.0f", x)).toList());
            }
        }
    }

    private static double rowsPerSecond(Path file, DataFormat format) {
        long[] rows = {0};
        long start = System.nanoTime();
        Rows.read(new DatasetFiles.DataFile(file, format), row -> rows[0]++);
        return rows[0] / ((System.nanoTime() - start) / 1e9);
    }

    private static double examplesPerSecond(Path file, Path tokenizerDir) {
        DatasetSpec spec = new DatasetSpec(file, DatasetType.ALPACA, null, null, null, null, null, null, "bench", null,
                "train", null, null);
        DataOptions options = new DataOptions(512, false, false, 0, 42, Recipe.ExcessLength.TRUNCATE, false,
                DataOptions.Templates.NONE, dev.finetune.recipes.DataSelection.DEFAULTS);
        try (Tokenizer tokenizer = Tokenizer.load(tokenizerDir)) {
            long start = System.nanoTime();
            int examples = DataPipeline.prepare(List.of(spec), options, tokenizer).train().size();
            return examples / ((System.nanoTime() - start) / 1e9);
        }
    }
}
