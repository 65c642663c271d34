package dev.finetune.recipes.model;

import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.hub.HubCache;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;

/**
 * Where a model's architecture comes from: an explicit {@code --model-config}, the {@code config.json} of a local
 * {@code base_model} directory, the {@code config.json} of a hub model in the HF cache (what {@code finetune download}
 * or any Hugging Face tool fetched), or the built-in table of well-known hub models.
 */
public sealed interface ModelSource {

    /**
     * The architecture was found; {@code from} says where, for the plan's header.
     *
     * @param config the architecture, {@code overrides_of_model_config} applied
     * @param json the config.json it was read from, as written (before the overrides)
     */
    record Found(ModelConfig config, String from, JsonObject json) implements ModelSource {}

    /**
     * A remote model we have no table entry for. Not an error for {@code validate}; {@code plan} needs the numbers.
     */
    record Unknown(String baseModel) implements ModelSource {
        public UserError asError() {
            return new UserError("base_model", "no architecture known for '" + baseModel + "'",
                    "plan needs its config.json: run 'finetune download " + baseModel + "' (it fills the HF cache, "
                            + "which plan reads), or pass --model-config path/to/config.json");
        }
    }

    /**
     * Resolves {@code baseModel}, which is relative to {@code recipeDir} when it names a local path. Never asks the
     * hub: {@code validate} and {@code plan} answer offline, from what the cache holds.
     *
     * @param revision {@code revision_of_model}, or {@code null} for {@code main}
     * @param modelConfig a {@code config.json} file or a directory holding one; {@code null} when not given
     */
    static ModelSource resolve(String baseModel, String revision, Path recipeDir, Path modelConfig) {
        return resolve(baseModel, revision, recipeDir, modelConfig, Map.of());
    }

    /** As {@link #resolve(String, String, Path, Path)}, with the recipe's {@code overrides_of_model_config} applied. */
    static ModelSource resolve(String baseModel, String revision, Path recipeDir, Path modelConfig,
            Map<String, Object> overrides) {
        if (modelConfig != null) {
            Path file = Files.isDirectory(modelConfig) ? modelConfig.resolve("config.json") : modelConfig;
            return found(readFile(file), file.toString(), file.toString(), overrides);
        }
        Path local = recipeDir == null ? Path.of(baseModel) : recipeDir.resolve(baseModel);
        if (Files.isDirectory(local)) {
            return found(ModelConfig.json(local), "its config.json", local.resolve("config.json").toString(), overrides);
        }
        Optional<Path> cached = cachedConfig(HubEnvironment.current().cache(), baseModel, revision);
        if (cached.isPresent()) {
            Path snapshot = cached.get().getParent();
            return found(readFile(cached.get()), "config.json in the HF cache, commit "
                    + snapshot.getFileName().toString().substring(0, 7), cached.get().toString(), overrides);
        }
        return KnownModels.json(baseModel)
                .<ModelSource>map(json -> found(json, "built-in table", "the built-in table's " + baseModel, overrides))
                .orElseGet(() -> new Unknown(baseModel));
    }

    private static Found found(JsonObject json, String from, String where, Map<String, Object> overrides) {
        return new Found(ModelConfig.fromJson(ConfigOverrides.apply(json, overrides), where), from, json);
    }

    /** {@code config.json} of a hub model at {@code revision} in the cache, when the cache resolved it. */
    static Optional<Path> cachedConfig(HubCache cache, String repoId, String revision) {
        if (repoId == null || repoId.isBlank() || repoId.startsWith("/") || repoId.startsWith(".")) {
            return Optional.empty();
        }
        try {
            return cache.snapshotFor(RepoType.MODEL, repoId, revision == null ? "main" : revision)
                    .map(s -> s.resolve("config.json")).filter(Files::isRegularFile);
        } catch (java.nio.file.InvalidPathException e) {
            return Optional.empty();
        }
    }

    private static JsonObject readFile(Path file) {
        try {
            String text = dev.finetune.recipes.BoundedFiles.readText(file,
                    dev.finetune.recipes.BoundedFiles.CONFIG_BYTES, "the model config");
            return JsonParser.parseString(text).getAsJsonObject();
        } catch (JsonParseException | IllegalStateException e) {
            throw new UserError(file.toString(), "not a JSON object: " + ModelConfig.jsonProblem(e),
                    "check the file is a Hugging Face config.json");
        }
    }
}
