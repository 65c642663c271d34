package dev.finetune.trainers.hub;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Pattern;

/**
 * {@code base_model} (and {@code tokenizer_config}, {@code base_model_config}) to a local folder: a folder as it is,
 * a hub id through the HF cache, fetched there when files are missing and the hub may be asked.
 */
public final class HubModels {
    /** {@code org/name} or {@code name}: the hub's repo id grammar. */
    private static final Pattern REPO_ID = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?");

    private HubModels() {}

    public static boolean isRepoId(String name) {
        return name != null && REPO_ID.matcher(name).matches() && !name.contains("..") && !name.endsWith(".git");
    }

    /** {@code base_model}'s folder: config, weights and tokenizer. */
    public static Path base(Recipe.Model model) {
        // overrides_of_model_config: a folder whose config.json has them, so every reader sees the model as trained
        return ConfiguredModel.of(folder(model.baseModel(), model.revision(), ModelFiles.TRAINING, "base_model"),
                model.configOverrides());
    }

    /** The tokenizer's folder: {@code tokenizer_config}'s when set, else {@code base_model}'s. */
    public static Path tokenizer(Recipe.Model model) {
        if (model.tokenizerConfig() == null) {
            return base(model);
        }
        String revision = model.tokenizerConfig().equals(model.baseModel()) ? model.revision() : null;
        return folder(model.tokenizerConfig(), revision, ModelFiles.TOKENIZER, "tokenizer_config");
    }

    /**
     * What {@code base_model} resolved to in this process: a local folder ({@code commit} null) or the hub snapshot
     * whose commit a run's provenance and resume identity record. The one place to ask which commit a run trains.
     */
    public static Snapshot resolve(Recipe.Model model) {
        return resolve(model.baseModel(), model.revision(), ModelFiles.TRAINING, "base_model", HubEnvironment.current());
    }

    /**
     * The folder holding the model's files.
     *
     * @param revision branch, tag or commit ({@code revision_of_model}); {@code null} for {@code main}
     * @param key the recipe key that named it, for messages
     */
    public static Path folder(String name, String revision, ModelFiles files, String key) {
        return resolve(name, revision, files, key, HubEnvironment.current()).folder();
    }

    /** A local folder (no snapshot: {@code commit} null) or the pinned hub snapshot. */
    public static Snapshot resolve(String name, String revision, ModelFiles files, String key, HubEnvironment env) {
        Path dir = Path.of(name);
        if (Files.isDirectory(dir)) {
            return new Snapshot(RepoType.MODEL, name, null, null, dir);
        }
        if (!isRepoId(name)) {
            throw new UserError(key, "'" + name + "' is neither a local model folder nor a hub model id",
                    "point " + key + " at a folder with config.json and safetensors weights, or name a hub repo as org/name");
        }
        return new Fetcher(env).pinned(RepoType.MODEL, name, revision == null ? "main" : revision, files, key);
    }
}
