package dev.finetune.recipes.model;

import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Where a model's architecture comes from: an explicit {@code --model-config}, the {@code config.json} of a local
 * {@code base_model} directory, or the built-in table of well-known hub models.
 */
public sealed interface ModelSource {

    /** The architecture was found; {@code from} says where, for the plan's header. */
    record Found(ModelConfig config, String from) implements ModelSource {}

    /**
     * A remote model we have no table entry for. Not an error for {@code validate}; {@code plan} needs the numbers.
     */
    record Unknown(String baseModel) implements ModelSource {
        public UserError asError() {
            return new UserError("base_model", "no architecture known for '" + baseModel + "'",
                    "plan needs its config.json: download it and pass --model-config path/to/config.json "
                            + "(or point base_model at a local model directory)");
        }
    }

    /**
     * Resolves {@code baseModel}, which is relative to {@code recipeDir} when it names a local path.
     *
     * @param modelConfig a {@code config.json} file or a directory holding one; {@code null} when not given
     */
    static ModelSource resolve(String baseModel, Path recipeDir, Path modelConfig) {
        if (modelConfig != null) {
            Path file = Files.isDirectory(modelConfig) ? modelConfig.resolve("config.json") : modelConfig;
            return new Found(readFile(file), file.toString());
        }
        Path local = recipeDir == null ? Path.of(baseModel) : recipeDir.resolve(baseModel);
        if (Files.isDirectory(local)) {
            return new Found(ModelConfig.read(local), local.resolve("config.json").toString());
        }
        return KnownModels.lookup(baseModel)
                .<ModelSource>map(c -> new Found(c, "built-in table"))
                .orElseGet(() -> new Unknown(baseModel));
    }

    private static ModelConfig readFile(Path file) {
        try {
            String text = Files.readString(file);
            return ModelConfig.fromJson(JsonParser.parseString(text).getAsJsonObject(), file.toString());
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot read model config: " + e.getMessage(),
                    "pass --model-config a Hugging Face config.json file or its directory");
        } catch (JsonParseException | IllegalStateException e) {
            throw new UserError(file.toString(), "not a JSON object: " + e.getMessage(), "check the file is a Hugging Face config.json");
        }
    }
}
