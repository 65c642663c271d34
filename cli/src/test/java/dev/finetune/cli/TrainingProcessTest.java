package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonObject;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.recipes.FinetuneVersion;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.backend.OutputFolder;
import dev.finetune.trainers.backend.SavedModels;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.output.MetricsLog;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code finetune RECIPE} end to end in child JVMs on the quickstart (stories260K, LoRA, real data), shortened by
 * overrides: output layout and metrics, PEFT files our loader reads, merge-lora logits, the kill drill with
 * {@code kill -9}, refused resumes, and bad input that leaves nothing behind.
 */
class TrainingProcessTest {
    private static final List<String> STEP_KEYS = List.of("step", "epoch", "loss", "learning_rate", "grad_norm",
            "tokens_per_second", "peak_memory_mb");
    private static final List<String> EXACT = List.of("loss", "grad_norm", "learning_rate", "epoch", "eval_loss");

    record Run(int exit, String out, String err) {}

    /** The quickstart recipe in {@code dir}, with its own copy of the data and an absolute base_model. */
    private static Path recipe(Path dir, String dataName, String data) throws IOException {
        Path configs = MainProcessTest.repoRoot().resolve("configs");
        String text = Files.readString(configs.resolve("quickstart.yaml"))
                .replace("base_model: ./models/stories260K", "base_model: " + configs.resolve("models/stories260K"))
                .replace("path: data/quickstart.jsonl", "path: " + dataName);
        Files.writeString(dir.resolve(dataName), data);
        Path recipe = dir.resolve("recipe.yaml");
        Files.writeString(recipe, text);
        return recipe;
    }

    private static String quickstartData() throws IOException {
        return Files.readString(MainProcessTest.repoRoot().resolve("configs/data/quickstart.jsonl"));
    }

    private static ProcessBuilder command(Path workDir, Path log, String... args) {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dai.djl.offline=true",
                // one engine thread in every run, so that a resumed run can repeat the reference bit for bit
                "-Dai.djl.pytorch.num_threads=1", "-Dai.djl.pytorch.num_interop_threads=1",
                "-Dfinetune.home=" + MainProcessTest.repoRoot(), "-cp", System.getProperty("java.class.path"),
                Main.class.getName()));
        command.addAll(List.of(args));
        ProcessBuilder builder = new ProcessBuilder(command).directory(workDir.toFile());
        builder.environment().put("OMP_WAIT_POLICY", "PASSIVE");
        return builder.redirectOutput(log.resolveSibling(log.getFileName() + ".out").toFile())
                .redirectError(log.resolveSibling(log.getFileName() + ".err").toFile());
    }

    private static Run run(Path workDir, String... args) throws Exception {
        Path log = Files.createTempFile(workDir.getParent(), "finetune", "");
        Process process = command(workDir, log, args).start();
        assertTrue(process.waitFor(180, TimeUnit.SECONDS), "finetune did not finish");
        return new Run(process.exitValue(), read(log, ".out"), read(log, ".err"));
    }

    private static String read(Path log, String suffix) throws IOException {
        return Files.readString(log.resolveSibling(log.getFileName() + suffix), StandardCharsets.UTF_8);
    }

    private static String sha256(byte[] bytes) throws java.security.NoSuchAlgorithmException {
        return java.util.HexFormat.of().formatHex(java.security.MessageDigest.getInstance("SHA-256").digest(bytes));
    }

    private static List<JsonObject> metrics(Path outputDir) {
        return MetricsLog.read(outputDir.resolve(MetricsLog.FILE));
    }

    @Test
    @Timeout(300)
    void shortQuickstartWritesTheHfLayoutAndMergesExactly(@TempDir Path dir) throws Exception {
        Path work = Files.createDirectories(dir.resolve("work"));
        Path recipe = recipe(dir, "stories.jsonl", quickstartData());
        Run train = run(work, recipe.toString(), "max_steps=6", "save_steps=3", "eval_steps=3", "save_total_limit=1",
                "output_dir=run");
        assertEquals(0, train.exit(), train.err());
        assertTrue(train.out().contains("data: 324 train / 36 eval examples"), train.out());
        assertTrue(train.out().contains("model: LoRA r=8 alpha=16 on 35 linear layers"), train.out());
        assertTrue(train.out().contains("sample before training: \"Once upon a time"), train.out());
        assertTrue(train.out().contains("sample after training:  \"Once upon a time"), train.out());

        Path run = work.resolve("run");
        for (String file : List.of("adapter_config.json", "adapter_model.safetensors", "tokenizer.json",
                "tokenizer_config.json", "special_tokens_map.json", "recipe.resolved.yaml", "metrics.jsonl", "loss.png",
                "checkpoint-6/" + CheckpointStore.STATE, "checkpoint-6/" + CheckpointStore.ADAPTER_WEIGHTS,
                "checkpoint-6/adapter_config.json", "checkpoint-6/trainer_state.json")) {
            assertTrue(Files.isRegularFile(run.resolve(file)), file);
        }
        assertFalse(Files.exists(run.resolve("checkpoint-3")), "save_total_limit: 1 keeps only the newest");
        List<JsonObject> lines = metrics(run);
        assertEquals(7, lines.size(), "step 0's evaluation, then one line per step");
        assertEquals(0, lines.get(0).get("step").getAsInt());
        assertTrue(lines.get(0).has("eval_loss") && !lines.get(0).has("loss"));
        for (int step = 1; step <= 6; step++) {
            JsonObject line = lines.get(step);
            assertEquals(step, line.get("step").getAsInt());
            for (String key : STEP_KEYS) {
                assertTrue(line.has(key) && Double.isFinite(line.get(key).getAsDouble()), key + " at step " + step);
            }
            assertEquals(step % 3 == 0, line.has("eval_loss"), "eval_steps: 3, step " + step);
        }
        assertTrue(lines.get(6).get("eval_loss").getAsDouble() < lines.get(0).get("eval_loss").getAsDouble());
        // the resolved recipe stands on its own from the output folder
        assertEquals(6, ValidatedRecipe.load(run.resolve("recipe.resolved.yaml"), List.of()).recipe().training().maxSteps());
        // provenance: the exact recipe bytes, the overrides, the resolved recipe written, the build and the model
        JsonObject provenance = com.google.gson.JsonParser.parseString(Files.readString(run.resolve(OutputFolder.MARKER)))
                .getAsJsonObject().getAsJsonObject("provenance");
        assertEquals(FinetuneVersion.get(), provenance.get("finetune_version").getAsString());
        JsonObject recipeFile = provenance.getAsJsonArray("recipe_files").get(0).getAsJsonObject();
        assertEquals(recipe.toString(), recipeFile.get("file").getAsString());
        assertEquals(sha256(Files.readAllBytes(recipe)), recipeFile.get("sha256").getAsString());
        assertEquals(List.of("eval_steps=3", "max_steps=6", "output_dir=run", "save_steps=3", "save_total_limit=1"),
                provenance.getAsJsonArray("overrides").asList().stream().map(e -> e.getAsString()).sorted().toList());
        assertEquals(sha256(Files.readAllBytes(run.resolve("recipe.resolved.yaml"))),
                provenance.get("resolved_recipe_sha256").getAsString());
        JsonObject model = provenance.getAsJsonObject("base_model");
        assertEquals(MainProcessTest.repoRoot().resolve("configs/models/stories260K").toString(), model.get("path").getAsString());
        assertEquals(64, model.get("sha256").getAsString().length());

        Run merge = run(work, "merge-lora", "run", "--out", "merged");
        assertEquals(0, merge.exit(), merge.err());
        Run generate = run(work, "generate", "run", "--prompt", "Once upon a time", "--greedy", "--max-new-tokens", "8");
        assertEquals(0, generate.exit(), generate.err());
        assertTrue(generate.out().startsWith("Once upon a time"), generate.out());

        try (NDManager manager = NDManager.newBaseManager()) {
            AdapterFiles.Saved saved = AdapterFiles.read(run, manager);
            assertEquals(8, saved.config().r());
            assertEquals(16.0, saved.config().loraAlpha());
            assertEquals(new AdapterConfig.Targets.Names(List.of("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj",
                    "up_proj", "v_proj")), saved.config().targets());
            assertEquals(70, saved.tensors().size());
            assertEquals(new Shape(8, 64), saved.tensors().get("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").getShape());
            assertEquals(new Shape(172, 8), saved.tensors().get("base_model.model.model.layers.4.mlp.up_proj.lora_B.weight").getShape());

            long[] ids = {1, 403, 407, 261, 378, 429, 261, 300, 301, 17};
            float[] adapted = logits(SavedModels.load(run, manager), ids, manager);
            float[] merged = logits(LlamaModel.load(work.resolve("merged"), manager, LoadOptions.inference()), ids, manager);
            float[] base = logits(LlamaModel.load(MainProcessTest.repoRoot().resolve("configs/models/stories260K"), manager,
                    LoadOptions.inference()), ids, manager);
            assertTrue(maxDifference(adapted, merged) < 1e-4, "merged vs base+adapter: " + maxDifference(adapted, merged));
            assertTrue(maxDifference(adapted, base) > 1e-2, "the adapter changed nothing: " + maxDifference(adapted, base));
        }
    }

    private static float[] logits(LlamaModel model, long[] ids, NDManager manager) {
        try (NDManager step = manager.newSubManager()) {
            NDArray input = step.create(ids, new Shape(1, ids.length));
            NDArray positions = step.arange(0, ids.length, 1, DataType.INT64).expandDims(0);
            return model.forward(input, positions, null).toFloatArray();
        }
    }

    private static double maxDifference(float[] a, float[] b) {
        assertEquals(a.length, b.length);
        double max = 0;
        for (int i = 0; i < a.length; i++) {
            max = Math.max(max, Math.abs(a[i] - b[i]));
        }
        return max;
    }

    @Test
    @Timeout(400)
    void killedRunResumesBitForBitAndChangedRecipesAreRefused(@TempDir Path dir) throws Exception {
        Path work = Files.createDirectories(dir.resolve("work"));
        Path recipe = recipe(dir, "stories.jsonl", quickstartData());
        String[] shortRun = {"max_steps=24", "save_steps=4", "eval_steps=8", "save_total_limit=2"};
        Run reference = run(work, concat(recipe.toString(), shortRun, "output_dir=reference"));
        assertEquals(0, reference.exit(), reference.err());

        // kill -9 a little after the first checkpoint is published
        Path killed = work.resolve("killed");
        Process process = command(work, dir.resolve("killed-log"), concat(recipe.toString(), shortRun, "output_dir=killed")).start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (!Files.isRegularFile(killed.resolve("checkpoint-4").resolve(CheckpointStore.STATE))) {
            assertTrue(process.isAlive() && System.nanoTime() < deadline, "no checkpoint before the run ended");
            Thread.sleep(10);
        }
        Thread.sleep(new Random().nextInt(300));
        process.destroyForcibly(); // SIGKILL
        assertTrue(process.waitFor(30, TimeUnit.SECONDS));
        assertFalse(Files.exists(killed.resolve("adapter_model.safetensors")), "the run finished before the kill");
        int linesAtKill = metrics(killed).size();

        Run resumed = run(work, concat(recipe.toString(), shortRun, "output_dir=killed", "resume_from_checkpoint=true"));
        assertEquals(0, resumed.exit(), resumed.err());
        assertTrue(resumed.err().contains("resumed from"), resumed.err());
        List<JsonObject> want = metrics(work.resolve("reference"));
        List<JsonObject> got = metrics(killed);
        assertEquals(25, want.size());
        assertEquals(want.size(), got.size(), "steps neither repeated nor lost (" + linesAtKill + " lines at the kill)");
        for (int i = 0; i < want.size(); i++) {
            assertEquals(i, got.get(i).get("step").getAsInt());
            for (String key : EXACT) {
                assertEquals(want.get(i).get(key), got.get(i).get(key), key + " at step " + i);
            }
        }
        assertEquals(-1L, Files.mismatch(work.resolve("reference/adapter_model.safetensors"),
                killed.resolve("adapter_model.safetensors")), "final adapters differ");

        // resumes the checkpoints were not written for are refused before anything is written
        byte[] resolved = Files.readAllBytes(killed.resolve("recipe.resolved.yaml"));
        Path otherModel = Files.createDirectories(dir.resolve("stories-copy"));
        Path modelDir = MainProcessTest.repoRoot().resolve("configs/models/stories260K");
        try (var files = Files.list(modelDir)) {
            for (Path file : files.toList()) {
                Files.copy(file, otherModel.resolve(file.getFileName()));
            }
        }
        Map<String, String[]> changes = Map.of(
                "lora_r: 8 → 4", new String[] {"lora_r=4"},
                "base_model: ", new String[] {"base_model=" + otherModel},
                // AdamW's moments are no SGD state, and SGD leaves none for AdamW to continue from
                "optimizer: (unset) → sgd", new String[] {"optimizer=sgd"});
        for (Map.Entry<String, String[]> change : changes.entrySet()) {
            Run refused = run(work, concat(recipe.toString(), shortRun, "output_dir=killed", "resume_from_checkpoint=true",
                    change.getValue()));
            assertEquals(2, refused.exit(), refused.err());
            assertTrue(refused.err().contains("was written by a different recipe"), refused.err());
            assertTrue(refused.err().contains(change.getKey()), change.getKey() + ": " + refused.err());
        }
        Files.writeString(dir.resolve("stories.jsonl"), quickstartData().replace("Bob", "Rob"));
        Run changedData = run(work, concat(recipe.toString(), shortRun, "output_dir=killed", "resume_from_checkpoint=true"));
        assertEquals(2, changedData.exit(), changedData.err());
        assertTrue(changedData.err().contains("datasets: sha256:"), changedData.err());
        assertTrue(java.util.Arrays.equals(resolved, Files.readAllBytes(killed.resolve("recipe.resolved.yaml"))),
                "a refused resume rewrote the output folder");
    }

    @Test
    @Timeout(120)
    void aBrokenDatasetLineOrAnFsdpRecipeExitTwoAndWriteNothing(@TempDir Path dir) throws Exception {
        Path work = Files.createDirectories(dir.resolve("work"));
        List<String> rows = new ArrayList<>(quickstartData().lines().toList());
        rows.set(2, "{\"text\": \"Once upon a time, there was a robot\"");
        Path recipe = recipe(dir, "broken.jsonl", String.join("\n", rows) + "\n");
        Run broken = run(work, recipe.toString(), "output_dir=run");
        assertEquals(2, broken.exit(), broken.err());
        assertTrue(broken.err().contains("broken.jsonl:3: not valid JSON"), broken.err());
        assertFalse(broken.err().contains("\tat "), broken.err());
        assertFalse(Files.exists(work.resolve("run")), "output_dir was created for bad input");

        // An fsdp recipe whose Python cannot run the worker is refused with the fix, before output_dir exists.
        Files.writeString(recipe, Files.readString(recipe).replace("hardware: cpu",
                "hardware: {gpus: 2, gpu_memory: 80GiB}").replace("backend: single", "backend: fsdp"));
        Files.writeString(dir.resolve("broken.jsonl"), quickstartData());
        Run fsdp = run(work, recipe.toString(), "output_dir=run", "--python", dir.resolve("no-python").toString());
        assertEquals(2, fsdp.exit(), fsdp.err());
        assertTrue(fsdp.err().contains("cannot run '" + dir.resolve("no-python")) && fsdp.err().contains("pip install"),
                fsdp.err());
        assertFalse(fsdp.err().contains("\tat "), fsdp.err());
        assertFalse(Files.exists(work.resolve("run")), "output_dir was created for an fsdp recipe");
    }

    private static String[] concat(String first, String[] middle, String... last) {
        List<String> all = new ArrayList<>();
        all.add(first);
        all.addAll(List.of(middle));
        all.addAll(List.of(last));
        return all.toArray(String[]::new);
    }

    private static String[] concat(String first, String[] middle, String a, String b, String[] last) {
        List<String> all = new ArrayList<>(List.of(concat(first, middle, a, b)));
        all.addAll(List.of(last));
        return all.toArray(String[]::new);
    }
}
