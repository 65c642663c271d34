package dev.finetune.trainers.backend;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import dev.finetune.recipes.FinetuneVersion;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.hub.RepoType;
import dev.finetune.trainers.hub.Snapshot;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The identities a run records, checked against the tools a user would check them with: git and sha256sum. */
class ProvenanceTest {
    private static final Path MODEL = Path.of("../configs/models/stories260K").toAbsolutePath().normalize();

    @Test
    void recipeFilesOverridesAndModelFolderAreIdentifiedAsGitAndSha256sumDo(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("rows.jsonl"), "{\"text\": \"a\"}\n");
        Path base = Files.writeString(dir.resolve("common.yaml"), "# finetune: fragment\nbase_model: " + MODEL
                + "\ndatasets: [{path: rows.jsonl, type: completion}]\n");
        Path recipe = Files.writeString(dir.resolve("run.yaml"), """
                base: common.yaml
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                learning_rate: 1e-3
                """);
        ValidatedRecipe validated = ValidatedRecipe.load(recipe, List.of("max_steps=3"));
        String resolved = validated.flatten(dir);
        Provenance p = Provenance.of(validated, resolved,
                Provenance.ModelIdentity.of(new Snapshot(RepoType.MODEL, MODEL.toString(), null, null, MODEL)));

        assertEquals(FinetuneVersion.get(), p.finetuneVersion());
        assertEquals(List.of(recipe.toString(), base.toString()), p.recipeFiles().stream().map(Provenance.FileId::file).toList());
        for (Provenance.FileId f : p.recipeFiles()) {
            assertEquals(shell(dir, "git hash-object " + f.file()), f.gitBlob());
            assertEquals(shell(dir, "sha256sum " + f.file()).split(" ")[0], f.sha256());
        }
        assertEquals(List.of("max_steps=3"), p.overrides());
        Path written = Files.writeString(dir.resolve("resolved.yaml"), resolved);
        assertEquals(shell(dir, "sha256sum " + written).split(" ")[0], p.resolvedRecipeSha256());

        Provenance.ModelIdentity.Folder model = assertInstanceOf(Provenance.ModelIdentity.Folder.class, p.baseModel());
        assertEquals(shell(MODEL, "LC_ALL=C sha256sum * | sha256sum").split(" ")[0], model.sha256());
        assertEquals(MODEL.toString(), model.path());
        assertEquals(Long.parseLong(shell(MODEL, "cat * | wc -c").strip()), model.bytes());
    }

    @Test
    void aHubModelIsItsIdRevisionAndCommit(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("rows.jsonl"), "{\"text\": \"a\"}\n");
        Path recipe = Files.writeString(dir.resolve("run.yaml"), """
                base_model: meta-llama/Llama-3.2-1B
                datasets: [{path: rows.jsonl, type: completion}]
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                learning_rate: 1e-3
                """);
        ValidatedRecipe validated = ValidatedRecipe.load(recipe, List.of());
        String commit = "0123456789abcdef0123456789abcdef01234567";
        Provenance p = Provenance.of(validated, validated.flatten(dir), Provenance.ModelIdentity.of(new Snapshot(RepoType.MODEL,
                "meta-llama/Llama-3.2-1B", "main", commit, dir.resolve("snapshots").resolve(commit))));
        Provenance.ModelIdentity.Hub hub = assertInstanceOf(Provenance.ModelIdentity.Hub.class, p.baseModel());
        assertEquals("meta-llama/Llama-3.2-1B", hub.id());
        assertEquals("main", hub.revision());
        assertEquals(List.of(), p.overrides());
        com.google.gson.JsonObject json = p.toJson().getAsJsonObject("base_model");
        assertEquals("meta-llama/Llama-3.2-1B", json.get("hub_id").getAsString());
        assertEquals(commit, json.get("commit").getAsString());
    }

    private static String shell(Path dir, String command) throws IOException, InterruptedException {
        Process p = new ProcessBuilder("bash", "-c", command).directory(dir.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
        if (!p.waitFor(30, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException(command + ": " + out);
        }
        return out;
    }
}
