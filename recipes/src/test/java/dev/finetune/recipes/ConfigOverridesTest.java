package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.plan.RunPlan;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code overrides_of_model_config} (Axolotl's alias {@code model_config}) changes the model every reader sees: the
 * architecture validation and the plan count, and the trainer that runs the recipe; the single-device trainer refuses
 * a key it would not act on.
 */
class ConfigOverridesTest {
    static final Path STORIES = RunChecksTest.STORIES;

    static Path recipe(Path dir, String extra) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"text\": \"a b c\"}\n");
        Files.writeString(dir.resolve("r.yaml"), "base_model: " + STORIES + "\nlearning_rate: 1e-4\n"
                + "micro_batch_size: 1\ngradient_accumulation_steps: 1\nsequence_len: 64\n"
                + "datasets: [{path: d.jsonl, type: completion}]\n" + extra);
        return dir.resolve("r.yaml");
    }

    @Test
    void bothNamesReadTheSameOverridesIntoTheRecipe(@TempDir Path dir) throws IOException {
        ValidatedRecipe alias = ValidatedRecipe.load(recipe(dir, "model_config:\n  rope_theta: 500000.0\n"), List.of());
        assertEquals(Map.of("rope_theta", 500000.0), alias.recipe().model().configOverrides());
        ValidatedRecipe named = ValidatedRecipe.load(recipe(dir, "overrides_of_model_config: {rope_theta: 500000.0}\n"),
                List.of());
        assertEquals(alias.recipe().model().configOverrides(), named.recipe().model().configOverrides());
        InvalidRecipe both = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(recipe(dir,
                "model_config: {rope_theta: 1.0}\noverrides_of_model_config: {rope_theta: 2.0}\n"), List.of()));
        assertEquals(1, both.errors().size(), both.errors().toString());
        assertTrue(both.errors().get(0).where().endsWith("r.yaml:7:15"), both.errors().toString());
    }

    @Test
    void thePlanAndTheContextCheckSeeTheOverriddenModel(@TempDir Path dir) throws IOException {
        // stories260K's context is 512 tokens: sequence_len 1024 is refused, unless the override widens it
        InvalidRecipe narrow = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(recipe(dir, ""),
                List.of("sequence_len=1024")));
        assertTrue(narrow.errors().get(0).message().startsWith("sequence_len 1024 is beyond the model's context of 512"),
                narrow.errors().toString());
        ValidatedRecipe.load(recipe(dir, "overrides_of_model_config: {max_position_embeddings: 2048}\n"),
                List.of("sequence_len=1024"));

        ValidatedRecipe fewer = ValidatedRecipe.load(recipe(dir, "overrides_of_model_config: {num_hidden_layers: 2}\n"),
                List.of());
        var found = (dev.finetune.recipes.model.ModelSource.Found) RunPlan.source(fewer, dir, null);
        assertEquals(2, found.config().numHiddenLayers());
        assertEquals(5, found.json().get("num_hidden_layers").getAsInt(), "the file as written stays beside it");
    }

    @Test
    void theSingleDeviceTrainerRefusesAKeyItDoesNotRead(@TempDir Path dir) throws IOException {
        // rope_theta is read by the JVM trainer; attention_dropout is not (it has no attention dropout)
        ValidatedRecipe.load(recipe(dir, "overrides_of_model_config: {rope_theta: 500000.0, attention_dropout: 0.0}\n"),
                List.of());
        Path dropout = recipe(dir, "overrides_of_model_config:\n  rope_theta: 500000.0\n  attention_dropout: 0.1\n");
        InvalidRecipe single = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(dropout, List.of()));
        assertEquals(1, single.errors().size(), single.errors().toString());
        assertEquals("overrides_of_model_config: attention_dropout changes nothing the single-device trainer reads "
                + "from config.json (where this recipe runs), so it would have no effect",
                single.errors().get(0).message());
        assertTrue(single.errors().get(0).where().endsWith("r.yaml:9:3"), single.errors().toString());
        // transformers applies it on the worker
        ValidatedRecipe worker = ValidatedRecipe.load(dropout, List.of("backend=fsdp"));
        assertEquals(ResolvedRun.Backend.FSDP, worker.run().backend());
    }

    /** resize_token_embeddings_to_32x is accepted exactly where Axolotl's resize adds no row. */
    @Test
    void resizeTo32xIsAcceptedWhereItChangesNothing(@TempDir Path dir) throws IOException {
        ValidatedRecipe.load(recipe(dir, "resize_token_embeddings_to_32x: true\n"), List.of()); // 512 rows
        InvalidRecipe odd = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(recipe(dir,
                "resize_token_embeddings_to_32x: true\noverrides_of_model_config: {vocab_size: 500}\n"), List.of()));
        assertEquals(1, odd.errors().size(), odd.errors().toString());
        assertTrue(odd.errors().get(0).message().startsWith("resize_token_embeddings_to_32x: true is unsupported for "
                + "this model: its vocab_size 500"), odd.errors().toString());
        assertTrue(odd.errors().get(0).where().endsWith("r.yaml:7:33"), odd.errors().toString());
        Path hub = recipe(dir, "resize_token_embeddings_to_32x: true\n");
        Files.writeString(hub, Files.readString(hub).replace("base_model: " + STORIES, "base_model: org/unknown-model"));
        // only the hub has its config.json: the run checks it once fetched (HubModelTest), validate says so
        ValidatedRecipe unknown = ValidatedRecipe.load(hub, List.of());
        assertTrue(unknown.warnings().stream().anyMatch(w -> w.message().startsWith(
                "resize_token_embeddings_to_32x: true is checked when the run fetches")), unknown.warnings().toString());
    }

    /** model_revision, Axolotl's alias of revision_of_model, pins the commit trained as the key itself does. */
    @Test
    void modelRevisionIsRevisionOfModel(@TempDir Path dir) throws IOException {
        ValidatedRecipe alias = ValidatedRecipe.load(recipe(dir, "model_revision: v1.0\n"), List.of());
        assertEquals("v1.0", alias.recipe().model().revision());
        InvalidRecipe both = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(recipe(dir,
                "model_revision: v1.0\nrevision_of_model: main\n"), List.of()));
        assertEquals(1, both.errors().size(), both.errors().toString());
    }
}
