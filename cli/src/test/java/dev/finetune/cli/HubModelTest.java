package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.hub.RepoType;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Hub models through the Hugging Face cache, against a stand-in hub on 127.0.0.1 that the real huggingface_hub
 * and transformers talk to as well: both tools fill the same cache layout and each reads what the other fetched;
 * gated, unknown and unreachable repos are one-line errors; the token is never printed or written.
 */
class HubModelTest {
    static final String MODEL = "test-org/stories260K";
    static final String GATED = "test-org/gated-stories";
    static final String TOKEN = "hf_testTOKENthatMustNeverBePrinted0123";
    static TestHub hub;
    static String commit;

    @TempDir
    static Path shared;

    @BeforeAll
    static void publish() throws IOException {
        hub = TestHub.start();
        Path repo = modelRepo(shared.resolve("repo"));
        // files training does not read: a pickled copy, an original/ checkpoint folder and the model card
        Files.writeString(repo.resolve("README.md"), "---\nlicense: mit\n---\n# stories260K\n");
        Files.createDirectories(repo.resolve("original"));
        Files.write(repo.resolve("original/consolidated.pth"), new byte[4096]);
        Files.write(repo.resolve("pytorch_model.bin"), new byte[4096]);
        commit = hub.publish(RepoType.MODEL, MODEL, "main", repo);
        hub.publish(RepoType.MODEL, GATED, "main", modelRepo(shared.resolve("gated")));
        hub.gate(RepoType.MODEL, GATED, TOKEN);
    }

    @AfterAll
    static void stop() {
        hub.close();
    }

    /** The embedded model's files as a hub repo holds them. */
    static Path modelRepo(Path dir) throws IOException {
        Files.createDirectories(dir);
        Path stories = MainProcessTest.repoRoot().resolve("configs/models/stories260K");
        for (String f : List.of("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json")) {
            Files.copy(stories.resolve(f), dir.resolve(f));
        }
        return dir;
    }

    @Test
    void finetuneAndHuggingfaceHubLayTheCacheOutAlikeAndReadEachOthers(@TempDir Path dir) throws Exception {
        Path ours = dir.resolve("ours");
        Path theirs = dir.resolve("theirs");
        HubProcess.Run download = HubProcess.finetune(dir, HubProcess.env(ours, hub.endpoint()), "download", MODEL);
        assertEquals(0, download.exit(), download.all() + hub.log());
        assertTrue(download.out().contains(commit), download.out());
        HubProcess.pythonOk(dir, HubProcess.env(theirs, hub.endpoint()), "from huggingface_hub import snapshot_download\n"
                + "snapshot_download('" + MODEL + "', allow_patterns=['*.json', '*.safetensors'])");

        Path ourRepo = ours.resolve("hub/models--test-org--stories260K");
        Path theirRepo = theirs.resolve("hub/models--test-org--stories260K");
        assertEquals(Files.readString(theirRepo.resolve("refs/main")), Files.readString(ourRepo.resolve("refs/main")));
        assertEquals(commit, Files.readString(ourRepo.resolve("refs/main")));
        Path snapshot = ourRepo.resolve("snapshots").resolve(commit);
        List<String> files = list(snapshot);
        assertEquals(List.of("config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
                "tokenizer_config.json"), files, "training's files only: no .bin, no original/, no README");
        for (String f : files) {
            Path link = snapshot.resolve(f);
            assertTrue(Files.isSymbolicLink(link), f);
            assertEquals(Files.readSymbolicLink(theirRepo.resolve("snapshots").resolve(commit).resolve(f)),
                    Files.readSymbolicLink(link), f + ": the same relative link into blobs/");
        }
        assertEquals(list(theirRepo.resolve("blobs")), list(ourRepo.resolve("blobs")));
        // an optional file the repo lacks is remembered the way huggingface_hub remembers it
        assertTrue(Files.isRegularFile(ourRepo.resolve(".no_exist").resolve(commit).resolve("generation_config.json")));

        // transformers loads the model from the cache finetune filled, offline
        Map<String, String> offline = HubProcess.env(ours, "http://127.0.0.1:9");
        offline.put("HF_HUB_OFFLINE", "1");
        HubProcess.Run loaded = HubProcess.pythonOk(dir, offline, "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
                + "m = AutoModelForCausalLM.from_pretrained('" + MODEL + "', local_files_only=True)\n"
                + "t = AutoTokenizer.from_pretrained('" + MODEL + "', local_files_only=True)\n"
                + "print('params', sum(p.numel() for p in m.parameters()), 'vocab', len(t))");
        assertTrue(loaded.out().contains("params "), loaded.all());
    }

    @Test
    void aCacheFilledByHuggingfaceHubTrainsOfflineWithTheHubStopped(@TempDir Path dir) throws Exception {
        Path home = dir.resolve("hf");
        String stoppedCommit;
        try (TestHub own = TestHub.start()) {
            stoppedCommit = own.publish(RepoType.MODEL, MODEL, "main", modelRepo(dir.resolve("repo")));
            HubProcess.pythonOk(dir, HubProcess.env(home, own.endpoint()), "from huggingface_hub import snapshot_download\n"
                    + "snapshot_download('" + MODEL + "')");
        }
        Path recipe = recipe(dir, MODEL);
        Map<String, String> env = HubProcess.env(home, "http://127.0.0.1:9");
        env.put("HF_HUB_OFFLINE", "1");
        HubProcess.Run plan = HubProcess.finetune(dir, env, "plan", recipe.toString());
        assertEquals(0, plan.exit(), plan.all());
        assertTrue(plan.all().contains("config.json in the HF cache, commit " + stoppedCommit.substring(0, 7)), plan.all());
        HubProcess.Run run = HubProcess.finetune(dir, env, recipe.toString(), "max_steps=2");
        assertEquals(0, run.exit(), run.all());
        JsonObject marker = JsonParser.parseString(Files.readString(dir.resolve("out/finetune-run.json"))).getAsJsonObject();
        JsonObject base = marker.getAsJsonObject("provenance").getAsJsonObject("base_model");
        assertEquals(MODEL, base.get("hub_id").getAsString());
        assertEquals("main", base.get("revision").getAsString());
        assertEquals(stoppedCommit, base.get("commit").getAsString());
    }

    @Test
    void gatedReposNeedTheTokenWhichIsNeverShown(@TempDir Path dir) throws Exception {
        Map<String, String> env = HubProcess.env(dir.resolve("hf"), hub.endpoint());
        HubProcess.Run refused = HubProcess.finetune(dir, env, "download", GATED);
        HubProcess.assertOneLineError(refused, GATED, "gated", "accept its licence", "HF_TOKEN");

        env.put("HF_TOKEN", "hf_wrong");
        HubProcess.assertOneLineError(HubProcess.finetune(dir, env, "download", GATED), "gated", "the token from HF_TOKEN");

        // the token file under HF_HOME serves as huggingface_hub's does; a run with it records no token anywhere
        env.remove("HF_TOKEN");
        Files.createDirectories(dir.resolve("hf"));
        Files.writeString(dir.resolve("hf/token"), TOKEN + "\n");
        Path recipe = recipe(dir, GATED);
        HubProcess.Run run = HubProcess.finetune(dir, env, recipe.toString(), "max_steps=1");
        assertEquals(0, run.exit(), run.all());
        assertFalse(run.all().contains(TOKEN), "the token was printed");
        try (Stream<Path> written = Files.walk(dir.resolve("out"))) {
            for (Path f : written.filter(Files::isRegularFile).toList()) {
                assertFalse(new String(Files.readAllBytes(f), java.nio.charset.StandardCharsets.ISO_8859_1).contains(TOKEN),
                        "the token is in " + f);
            }
        }
        assertTrue(hub.storageAuthorized.stream().noneMatch(b -> b), "the token went to the storage host");
    }

    @Test
    void unknownReposRevisionsAndAMissingHubAreOneLineErrors(@TempDir Path dir) throws Exception {
        Map<String, String> env = HubProcess.env(dir.resolve("hf"), hub.endpoint());
        HubProcess.assertOneLineError(HubProcess.finetune(dir, env, "download", "test-org/no-such-model"),
                "no model repo 'test-org/no-such-model'", "check the id");
        HubProcess.assertOneLineError(HubProcess.finetune(dir, env, "download", MODEL, "--revision", "v9"),
                "revision 'v9' does not exist");
        Map<String, String> nowhere = HubProcess.env(dir.resolve("hf"), "http://127.0.0.1:9");
        HubProcess.assertOneLineError(HubProcess.finetune(dir, nowhere, "download", MODEL), "cannot reach the hub",
                "HF_ENDPOINT", "HF_HUB_OFFLINE=1");
        nowhere.put("HF_HUB_OFFLINE", "1");
        HubProcess.Run offline = HubProcess.finetune(dir, nowhere, recipe(dir, MODEL).toString());
        HubProcess.assertOneLineError(offline, "not (completely) in the HF cache", "HF_HUB_OFFLINE", "finetune download");
        assertFalse(Files.exists(dir.resolve("out")), "a refused run wrote its output folder");
    }

    /**
     * A check that needs the model's shape, which only the hub has when validate runs, is made once the run has
     * fetched config.json and before it fetches any weight: validate warns, the run refuses at the key's line.
     */
    @Test
    void checksThatNeedTheHubsConfigRunBeforeTheWeightsAreFetched(@TempDir Path dir) throws Exception {
        String odd = "test-org/odd-vocab";
        Path repo = modelRepo(dir.resolve("repo"));
        Files.writeString(repo.resolve("config.json"), Files.readString(repo.resolve("config.json"))
                .replaceFirst("\"vocab_size\":\\s*512", "\"vocab_size\": 500"));
        hub.publish(RepoType.MODEL, odd, "main", repo);
        Path recipe = recipe(dir, odd);
        Files.writeString(recipe, Files.readString(recipe) + "resize_token_embeddings_to_32x: true\n");
        Map<String, String> env = HubProcess.env(dir.resolve("hf"), hub.endpoint());

        HubProcess.Run validate = HubProcess.finetune(dir, env, "validate", recipe.toString());
        assertEquals(0, validate.exit(), validate.all());
        assertTrue(validate.err().contains("resize_token_embeddings_to_32x: true is checked when the run fetches"),
                validate.all());
        HubProcess.Run run = HubProcess.finetune(dir, env, recipe.toString());
        HubProcess.assertOneLineError(run, "hub.yaml:16", "its vocab_size 500");
        Path cached = dir.resolve("hf/hub/models--test-org--odd-vocab/snapshots");
        assertTrue(list(cached).stream().anyMatch(f -> f.endsWith("config.json")), list(cached).toString());
        assertTrue(list(cached).stream().noneMatch(f -> f.endsWith(".safetensors")), "weights fetched: " + list(cached));
        assertFalse(Files.exists(dir.resolve("out")), "a refused run wrote its output folder");
    }

    /** A short LoRA SFT recipe on the quickstart data for {@code model}. */
    static Path recipe(Path dir, String model) throws IOException {
        Path data = MainProcessTest.repoRoot().resolve("configs/data/quickstart.jsonl");
        return Files.writeString(dir.resolve("hub.yaml"), "base_model: " + model + "\n"
                + "datasets:\n  - path: " + data + "\n    type: completion\n"
                + "output_dir: " + dir.resolve("out") + "\n"
                + "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n"
                + "sequence_len: 128\nmicro_batch_size: 2\ngradient_accumulation_steps: 1\nlearning_rate: 1e-3\n"
                + "hardware: cpu\nbackend: single\n");
    }

    static List<String> list(Path dir) throws IOException {
        try (Stream<Path> files = Files.walk(dir)) {
            return files.filter(p -> !Files.isDirectory(p)).map(p -> dir.relativize(p).toString()).sorted().toList();
        }
    }
}
