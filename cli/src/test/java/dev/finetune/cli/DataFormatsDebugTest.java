package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The same rows as JSON Lines, CSV, Parquet and Arrow (datasets' save_to_disk folder) give the same tokenized
 * examples: {@code finetune preprocess --debug} prints the same tokens and labels for each.
 */
class DataFormatsDebugTest {

    @Test
    void everyFormatPreprocessesToTheSameExamples(@TempDir Path dir) throws Exception {
        Path rows = dir.resolve("rows.jsonl");
        List<String> lines = Files.readAllLines(MainProcessTest.repoRoot().resolve("configs/data/quickstart-dpo.jsonl"));
        StringBuilder alpaca = new StringBuilder();
        for (String line : lines.subList(0, 20)) {
            var o = com.google.gson.JsonParser.parseString(line).getAsJsonObject();
            var a = new com.google.gson.JsonObject();
            a.addProperty("instruction", "Finish the story.");
            a.addProperty("input", o.get("prompt").getAsString());
            a.addProperty("output", o.get("chosen").getAsString().strip());
            alpaca.append(a).append('\n');
        }
        Files.writeString(rows, alpaca.toString());
        HubProcess.pythonOk(dir, Map.of(), "import csv, json, datasets, pyarrow as pa, pyarrow.parquet as pq\n"
                + "rows = [json.loads(l) for l in open('rows.jsonl')]\n"
                + "pq.write_table(pa.Table.from_pylist(rows), 'rows.parquet')\n"
                + "w = csv.DictWriter(open('rows.csv', 'w', newline=''), fieldnames=list(rows[0]))\n"
                + "w.writeheader(); w.writerows(rows)\n"
                + "datasets.Dataset.from_list(rows).save_to_disk('saved')\n");
        String expected = null;
        for (String path : List.of("rows.jsonl", "rows.csv", "rows.parquet", "saved")) {
            Path recipe = Files.writeString(dir.resolve("r.yaml"), "base_model: "
                    + MainProcessTest.repoRoot().resolve("configs/models/stories260K") + "\n"
                    + "datasets:\n  - path: " + dir.resolve(path) + "\n    type: alpaca\n"
                    + "output_dir: " + dir.resolve("out-" + path) + "\n"
                    + "sequence_len: 512\nmicro_batch_size: 2\ngradient_accumulation_steps: 1\nlearning_rate: 1e-3\n"
                    + "hardware: cpu\n");
            HubProcess.Run run = HubProcess.finetune(dir, Map.of(), "preprocess", recipe.toString(), "--debug", "20");
            assertEquals(0, run.exit(), run.all());
            // parquet-java's own info lines (each decompressor it opens) are not the user's business
            assertFalse(run.all().contains("decompressor"), run.all());
            String examples = run.out().lines().filter(l -> !l.contains(dir.toString())).reduce("", (a, b) -> a + b + "\n");
            assertTrue(examples.contains("example 19:"), run.out());
            if (expected == null) {
                expected = examples;
            } else {
                assertEquals(expected, examples, path);
            }
        }
    }
}
