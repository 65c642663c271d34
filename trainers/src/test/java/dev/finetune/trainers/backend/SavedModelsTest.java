package dev.finetune.trainers.backend;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.recipes.UserError;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Where an adapter folder's base model is found when the adapter config's own path no longer leads there. */
class SavedModelsTest {
    private static final Path MODEL = Path.of("../configs/models/stories260K").toAbsolutePath().normalize();

    @TempDir
    Path dir;

    private void adapter(String base) throws Exception {
        new AdapterConfig(8, 16, 0, new AdapterConfig.Targets.Names(List.of("q_proj")), false, base).write(dir);
    }

    @Test
    void theAdapterConfigsBaseComesFirst() throws Exception {
        adapter(MODEL.toString());
        Files.writeString(dir.resolve(RunFiles.RESOLVED_RECIPE), "base_model: [not, a, path]\n");
        assertEquals(MODEL, SavedModels.baseOf(dir));
    }

    @Test
    void aMovedBaseIsFoundThroughTheResolvedRecipeAsYamlReadsIt() throws Exception {
        adapter("gone/stories260K");
        Path relative = dir.relativize(MODEL);
        // quoted, with a comment and a nested key of the same name: only the top-level value is the run's base
        Files.writeString(dir.resolve(RunFiles.RESOLVED_RECIPE), "datasets:\n  - base_model: elsewhere\n"
                + "base_model: '" + relative + "'  # as written in the recipe\nlora_r: 8\n");
        assertEquals(MODEL, SavedModels.baseOf(dir));
    }

    @Test
    void neitherLeadingToAModelSaysWhatWasTried() throws Exception {
        adapter("gone/stories260K");
        Files.writeString(dir.resolve(RunFiles.RESOLVED_RECIPE), "base_model: also/gone\n");
        UserError e = assertThrows(UserError.class, () -> SavedModels.baseOf(dir));
        assertTrue(e.getMessage().contains("gone/stories260K") && e.getMessage().contains("also/gone"), e.getMessage());
    }
}
