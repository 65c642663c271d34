package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.hub.RepoType;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The shipped recipes that name hub models and datasets run as written, with only their length and hardware (and
 * what the CPU trainer needs instead of GPU settings) overridden: the stand-in hub publishes the embedded model under
 * their model ids and small datasets of the right columns under their dataset ids. finetune-run.json then names the
 * hub ids and the commits read.
 */
class ShippedHubRecipesTest {
    static TestHub hub;
    static final Map<String, String> COMMITS = new HashMap<>();

    @TempDir
    static Path shared;

    @BeforeAll
    static void publish() throws IOException, InterruptedException {
        hub = TestHub.start();
        Path model = HubModelTest.modelRepo(shared.resolve("model"));
        for (String id : List.of("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-70B")) {
            COMMITS.put(id, hub.publish(RepoType.MODEL, id, "main", model));
        }
        Path script = shared.resolve("write_shipped_datasets.py");
        try (InputStream in = ShippedHubRecipesTest.class.getResourceAsStream("/hub/write_shipped_datasets.py")) {
            Files.copy(in, script);
        }
        Path data = MainProcessTest.repoRoot().resolve("configs/data");
        HubProcess.pythonOk(shared, Map.of(), "import runpy, sys; sys.argv = ['w', '" + data + "', '" + shared
                + "/datasets']; runpy.run_path('" + script + "', run_name='__main__')");
        COMMITS.put("yahma/alpaca-cleaned", hub.publish(RepoType.DATASET, "yahma/alpaca-cleaned", "main",
                shared.resolve("datasets/alpaca-cleaned")));
        COMMITS.put("Intel/orca_dpo_pairs", hub.publish(RepoType.DATASET, "Intel/orca_dpo_pairs", "main",
                shared.resolve("datasets/orca-dpo")));
    }

    @AfterAll
    static void stop() {
        hub.close();
    }

    @Test
    void llama8bQloraSft(@TempDir Path dir) throws Exception {
        run(dir, "llama-3.1-8b/qlora-sft.yaml", "meta-llama/Llama-3.1-8B", "yahma/alpaca-cleaned",
                "optimizer=adamw_torch", "bf16=false", "tf32=false");
    }

    @Test
    void qwen7bLoraDpo(@TempDir Path dir) throws Exception {
        run(dir, "qwen2.5-7b/lora-dpo.yaml", "Qwen/Qwen2.5-7B-Instruct", "Intel/orca_dpo_pairs", "bf16=false");
    }

    @Test
    void llama70bFullFsdpOverTwoCpuRanks(@TempDir Path dir) throws Exception {
        run(dir, "llama-3.1-70b/full-fsdp.yaml", "meta-llama/Llama-3.1-70B", "yahma/alpaca-cleaned", "bf16=false",
                "tf32=false", "--nproc-per-node", "2");
    }

    private void run(Path dir, String recipe, String model, String dataset, String... extra) throws Exception {
        List<String> args = new ArrayList<>(List.of(MainProcessTest.repoRoot().resolve("configs").resolve(recipe).toString(),
                "max_steps=2", "hardware=cpu", "sequence_len=512", "output_dir=" + dir.resolve("out"),
                "dataset_prepared_path=" + dir.resolve("prepared")));
        args.addAll(List.of(extra));
        HubProcess.Run run = HubProcess.finetune(dir, HubProcess.env(dir.resolve("hf"), hub.endpoint()),
                args.toArray(String[]::new));
        assertEquals(0, run.exit(), run.all());
        assertTrue(run.out().contains("hub: model " + model + " main = " + COMMITS.get(model)), run.out());
        JsonObject provenance = JsonParser.parseString(Files.readString(dir.resolve("out/finetune-run.json")))
                .getAsJsonObject().getAsJsonObject("provenance");
        JsonObject base = provenance.getAsJsonObject("base_model");
        assertEquals(model, base.get("hub_id").getAsString());
        assertEquals(COMMITS.get(model), base.get("commit").getAsString());
        JsonObject data = provenance.getAsJsonArray("datasets").get(0).getAsJsonObject();
        assertEquals(dataset, data.get("hub_id").getAsString());
        assertEquals(COMMITS.get(dataset), data.get("commit").getAsString());
        assertEquals("train", data.get("split").getAsString());
    }
}
