package dev.finetune.trainers.data;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.DataFormat;
import dev.finetune.recipes.DatasetSource;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.trainers.hub.DatasetFiles;
import dev.finetune.trainers.parity.PythonStack;
import dev.finetune.trainers.text.Tokenizer;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The same rows stored as JSON Lines, CSV, Parquet (every codec pyarrow writes but brotli) and Arrow IPC (as
 * datasets' save_to_disk writes it, and Arrow's file format), written by the real pyarrow and datasets: every
 * format reads back to the same JSON objects, and the SFT pipeline makes the same examples of them.
 */
class DataFormatsTest {
    @TempDir
    Path dir;

    @Test
    void flatRowsReadTheSameInEveryFormat() throws IOException {
        Path jsonl = Files.writeString(dir.resolve("rows.jsonl"), String.join("\n",
                "{\"instruction\": \"Say hi\", \"input\": \"\", \"output\": \"Hi, \\\"friend\\\".\"}",
                "{\"instruction\": \"Add\", \"input\": \"2, 3\", \"output\": \"5\\nthat is all\"}",
                "{\"instruction\": \"Name a fruit\", \"input\": \"red\", \"output\": \"apple\"}",
                "{\"instruction\": \"Unicode\", \"input\": \"é ü 日本\", \"output\": \"ok 👍\"}") + "\n");
        for (int i = 0; i < 16; i++) {
            Files.writeString(jsonl, "{\"instruction\": \"Count to " + i + "\", \"input\": \"\", \"output\": \"" + i
                    + "\"}\n", java.nio.file.StandardOpenOption.APPEND);
        }
        Path out = write(jsonl, true);
        List<JsonObject> expected = read(jsonl, DataFormat.JSON);
        assertEquals(20, expected.size());
        for (Path file : formats(out)) {
            assertEquals(expected, read(file, DataFormat.ofFile(file.getFileName().toString())), file.toString());
        }
        assertEquals(expected, read(out.resolve("rows.csv"), DataFormat.CSV));

        // the SFT pipeline sees the same rows, so it makes the same examples
        try (Tokenizer tokenizer = Tokenizer.load(DataPipelineTest.STORIES)) {
            List<Example> fromJson = examples(jsonl, tokenizer);
            for (Path file : List.of(out.resolve("rows.csv"), out.resolve("rows-snappy.parquet"),
                    out.resolve("rows-file.arrow"), out.resolve("saved"))) {
                List<Example> other = examples(file, tokenizer);
                assertEquals(fromJson.size(), other.size(), file.toString());
                for (int i = 0; i < other.size(); i++) {
                    assertEquals(java.util.Arrays.toString(fromJson.get(i).inputIds()), java.util.Arrays.toString(other.get(i).inputIds()));
                    assertEquals(java.util.Arrays.toString(fromJson.get(i).labels()), java.util.Arrays.toString(other.get(i).labels()));
                }
            }
        }
    }

    @Test
    void nestedRowsListsStructsAndNullsReadTheSame() throws IOException {
        Path jsonl = Files.writeString(dir.resolve("chat.jsonl"), String.join("\n",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"hello\"}], \"score\": 1.5, \"id\": 7, \"ok\": true, \"tags\": [\"a\", \"b\"], \"note\": null}",
                "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"2+2\"}, {\"role\": \"assistant\", \"content\": \"4\"}], \"score\": -0.25, \"id\": 8, \"ok\": false, \"tags\": [], \"note\": \"n\"}",
                "{\"messages\": [], \"score\": 0.0, \"id\": 9, \"ok\": true, \"tags\": [null, \"c\"], \"note\": null}") + "\n");
        Path out = write(jsonl, false);
        List<JsonObject> expected = read(jsonl, DataFormat.JSON);
        for (Path file : formats(out)) {
            assertEquals(expected, read(file, DataFormat.ofFile(file.getFileName().toString())), file.toString());
        }
    }

    @Test
    void shardsAreDatasetsContiguousBlocks() throws IOException {
        StringBuilder rows = new StringBuilder();
        for (int i = 0; i < 10; i++) {
            rows.append("{\"text\": \"row ").append(i).append("\"}\n");
        }
        Path jsonl = Files.writeString(dir.resolve("ten.jsonl"), rows.toString());
        // Dataset.shard(num_shards=3, index=i): 10 rows -> 4, 3, 3
        List<List<String>> expected = List.of(List.of("row 0", "row 1", "row 2", "row 3"),
                List.of("row 4", "row 5", "row 6"), List.of("row 7", "row 8", "row 9"));
        for (int index = 0; index < 3; index++) {
            DatasetSpec spec = new DatasetSpec(jsonl, DatasetType.COMPLETION, null, null, null, null, null, null,
                    "recipe.yaml:4:5", null, "train", null, null, dev.finetune.recipes.ChatOptions.DEFAULTS,
                    new DatasetSource(null, List.of(), null, null, 3, index));
            List<String> texts = new ArrayList<>();
            Rows.read(spec, row -> texts.add(row.value().get("text").getAsString()));
            assertEquals(expected.get(index), texts);
        }
    }

    @Test
    void aFolderIsReadByDatasetsSplitConventions() throws IOException {
        Path folder = Files.createDirectories(dir.resolve("repo/data"));
        Files.writeString(folder.resolve("train-00000-of-00002.jsonl"), "{\"text\": \"t0\"}\n");
        Files.writeString(folder.resolve("train-00001-of-00002.jsonl"), "{\"text\": \"t1\"}\n");
        Files.writeString(folder.resolve("test-00000-of-00001.jsonl"), "{\"text\": \"e0\"}\n");
        Files.writeString(dir.resolve("repo/README.md"), "# no card\n");
        assertEquals(List.of("t0", "t1"), texts(spec(dir.resolve("repo"), "train", List.of())));
        assertEquals(List.of("e0"), texts(spec(dir.resolve("repo"), "test", List.of())));
        assertEquals(List.of("t1"), texts(spec(dir.resolve("repo"), "train", List.of("data/train-00001-*.jsonl"))));
    }

    private static DatasetSpec spec(Path path, String split, List<String> dataFiles) {
        return new DatasetSpec(path, DatasetType.COMPLETION, null, null, null, null, null, null, "recipe.yaml:4:5",
                null, split, null, null, dev.finetune.recipes.ChatOptions.DEFAULTS, new DatasetSource(null, dataFiles, null, null, null, 0));
    }

    private static List<String> texts(DatasetSpec spec) {
        List<String> out = new ArrayList<>();
        Rows.read(spec, row -> out.add(row.value().get("text").getAsString()));
        return out;
    }

    private Path write(Path jsonl, boolean flat) {
        Path out = dir.resolve(jsonl.getFileName() + ".out");
        PythonStack.runScript(script(), dir, jsonl.toString(), out.toString(), flat ? "flat" : "nested");
        return out;
    }

    private Path script() {
        try {
            Path s = dir.resolve("write_formats.py");
            return Files.exists(s) ? s : PythonStack.script("/data/write_formats.py", dir);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** Every Parquet and Arrow file written, and the save_to_disk folder's Arrow shard. */
    private static List<Path> formats(Path out) throws IOException {
        try (Stream<Path> files = Files.walk(out)) {
            List<Path> found = files.filter(p -> p.toString().endsWith(".parquet") || p.toString().endsWith(".arrow")).sorted().toList();
            assertTrue(found.stream().anyMatch(p -> p.toString().contains("saved")), "save_to_disk wrote no .arrow file");
            assertFalse(found.isEmpty());
            return found;
        }
    }

    private static List<JsonObject> read(Path file, DataFormat format) {
        List<JsonObject> rows = new ArrayList<>();
        Rows.read(new DatasetFiles.DataFile(file, format), row -> {
            assertEquals(null, row.problem(), row.location());
            // numbers compare by value: 1.5 from JSON text and from a float64 column are the same number
            rows.add(JsonParser.parseString(row.value().toString().replace(".0,", ",").replace(".0}", "}")).getAsJsonObject());
        });
        return rows;
    }

    private static List<Example> examples(Path path, Tokenizer tokenizer) {
        DatasetSpec spec = new DatasetSpec(path, DatasetType.ALPACA, null, null, null, null, null, null, "recipe.yaml:4:5",
                null, "train", null, null);
        DataOptions options = DataDefaults.options();
        return DataPipeline.prepare(List.of(spec), options, tokenizer).train();
    }

    static String utf8(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }
}
