package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.DatasetSource;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import dev.finetune.trainers.data.Rows;
import dev.finetune.trainers.hub.DatasetFiles;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Hub datasets resolve as datasets.load_dataset resolves them: for each repo layout, configuration, split and
 * data_files, finetune reads exactly the rows the real datasets library loads from the same stand-in hub.
 */
class HubDatasetTest {
    static TestHub hub;
    static String conversionCommit;

    @TempDir
    static Path shared;

    @BeforeAll
    static void publish() throws IOException, InterruptedException {
        hub = TestHub.start();
        Path script = shared.resolve("write_datasets.py");
        try (InputStream in = HubDatasetTest.class.getResourceAsStream("/hub/write_datasets.py")) {
            Files.copy(in, script);
        }
        Path rows = MainProcessTest.repoRoot().resolve("configs/data/quickstart.jsonl");
        HubProcess.pythonOk(shared, Map.of(), "import runpy, sys; sys.argv = ['w', '" + rows + "', '" + shared
                + "/repos']; runpy.run_path('" + script + "', run_name='__main__')");
        Path repos = shared.resolve("repos");
        hub.publish(RepoType.DATASET, "test-org/stories-parquet", "main", repos.resolve("parquet"));
        hub.publish(RepoType.DATASET, "test-org/stories-configs", "main", repos.resolve("configs"));
        hub.publish(RepoType.DATASET, "test-org/scripted", "main", repos.resolve("scripted"));
        conversionCommit = hub.publish(RepoType.DATASET, "test-org/scripted", DatasetFiles.PARQUET_CONVERSION,
                repos.resolve("conversion"));
    }

    @AfterAll
    static void stop() {
        hub.close();
    }

    record Case(String id, String name, String split, List<String> dataFiles, String pythonArgs) {}

    @Test
    void everyLayoutConfigurationSplitAndDataFilesReadsWhatDatasetsLoads(@TempDir Path dir) throws Exception {
        List<Case> cases = List.of(
                new Case("test-org/stories-parquet", null, "train", List.of(), ""),
                new Case("test-org/stories-parquet", null, "test", List.of(), ""),
                new Case("test-org/stories-parquet", null, "train", List.of("data/train-00001-of-00002.parquet"),
                        ", data_files=['data/train-00001-of-00002.parquet']"),
                new Case("test-org/stories-configs", null, "train", List.of(), ""),
                new Case("test-org/stories-configs", "big", "validation", List.of(), ""),
                new Case("test-org/stories-configs", "small", "train", List.of(), ""),
                // datasets asks the dataset viewer's API for the conversion's files; the same files named directly
                new Case("test-org/scripted", null, "train", List.of(),
                        "REVISION:refs/convert/parquet, data_files={'train': 'default/train/*.parquet'}"),
                new Case("test-org/scripted", null, "test", List.of(),
                        "REVISION:refs/convert/parquet, data_files={'test': 'default/test/*.parquet'}"));
        HubEnvironment env = HubEnvironment.of(HubProcess.env(dir.resolve("ours"), hub.endpoint()));
        for (Case c : cases) {
            String label = c.id() + " name=" + c.name() + " split=" + c.split() + " data_files=" + c.dataFiles();
            DatasetSpec spec = new DatasetSpec(null, DatasetType.COMPLETION, null, null, null, null, null, null,
                    "recipe.yaml:3:5", c.id(), c.split(), null, null, dev.finetune.recipes.ChatOptions.DEFAULTS,
                    new DatasetSource(c.name(), c.dataFiles(), null, null, null, 0));
            DatasetFiles.Resolved resolved = DatasetFiles.of(spec, env);
            List<JsonObject> ours = new ArrayList<>();
            for (DatasetFiles.DataFile f : resolved.files()) {
                Rows.read(f, row -> ours.add(normalized(row.value())));
            }
            List<JsonObject> theirs = load(dir, c);
            assertEquals(theirs.size(), ours.size(), label);
            assertEquals(theirs, ours, label);
            assertTrue(!ours.isEmpty(), label);
            if (c.id().equals("test-org/scripted")) {
                assertEquals(conversionCommit, resolved.snapshot().commit(), label);
                assertEquals(DatasetFiles.PARQUET_CONVERSION, resolved.snapshot().revision(), label);
            }
        }
    }

    /** The rows datasets.load_dataset gives for the case, from the same hub. */
    private static List<JsonObject> load(Path dir, Case c) throws IOException, InterruptedException {
        String args = c.pythonArgs();
        String revision = "";
        if (args.startsWith("REVISION:")) {
            revision = ", revision='" + args.substring(9, args.indexOf(',')) + "'";
            args = args.substring(args.indexOf(','));
        }
        String code = "import json, datasets\n"
                + "ds = datasets.load_dataset('" + c.id() + "'" + (c.name() == null ? "" : ", '" + c.name() + "'")
                + ", split='" + c.split() + "'" + revision + args + ")\n"
                + "for row in ds:\n    print(json.dumps(row))\n";
        HubProcess.Run r = HubProcess.pythonOk(dir, HubProcess.env(dir.resolve("theirs"), hub.endpoint()), code);
        List<JsonObject> rows = new ArrayList<>();
        for (String line : r.out().split("\n")) {
            if (line.startsWith("{")) {
                rows.add(normalized(JsonParser.parseString(line).getAsJsonObject()));
            }
        }
        return rows;
    }

    /** CSV cells are text in finetune and numbers in pandas: compare every value as text. */
    private static JsonObject normalized(JsonObject row) {
        JsonObject o = new JsonObject();
        row.entrySet().forEach(e -> o.addProperty(e.getKey(), e.getValue().isJsonNull() ? null : e.getValue().getAsString()));
        return o;
    }
}
