package dev.finetune.trainers.hub;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Everything a run reads from the hub, fetched into the HF cache once, at its start, after the fit check (which
 * reads the model's own config.json, see {@link #fetchConfig}) and before anything is written: the model, a separate tokenizer, and every
 * hub dataset. On the fsdp backend this runs in each node's launcher, so the ranks get local paths and never fetch.
 */
public final class RunInputs {
    private RunInputs() {}

    /**
     * Only the model's {@code config.json} (kilobytes), so that the fit check precedes the weights' download: a
     * recipe that cannot fit transfers nothing big. Where the hub cannot answer and the architecture is known
     * without it (the cache, the built-in table), the plan goes on from there and the download's own error comes
     * after the fit check, from {@link #fetch}.
     */
    public static void fetchConfig(Recipe recipe, boolean architectureKnownOffline) {
        try {
            HubModels.resolve(recipe.model().baseModel(), recipe.model().revision(), ModelFiles.CONFIG, "base_model",
                    HubEnvironment.current());
        } catch (dev.finetune.recipes.UserError e) {
            if (!architectureKnownOffline) {
                throw e;
            }
        }
    }

    /** The hub snapshots the recipe names, each said in one line ({@code repo revision = commit}). */
    public static List<Snapshot> fetch(Recipe recipe, PrintWriter out) {
        HubEnvironment env = HubEnvironment.current();
        List<Snapshot> fetched = new ArrayList<>();
        fetched.add(HubModels.resolve(recipe.model()));
        if (recipe.model().tokenizerConfig() != null && !recipe.model().tokenizerConfig().equals(recipe.model().baseModel())) {
            fetched.add(HubModels.resolve(recipe.model().tokenizerConfig(), null, ModelFiles.TOKENIZER, "tokenizer_config", env));
        }
        fetched.addAll(DatasetFiles.fetch(recipe, env));
        for (Snapshot s : fetched) {
            if (s.commit() != null) {
                out.printf(Locale.ROOT, "hub: %s %s %s = %s (%s)%n", s.type() == RepoType.MODEL ? "model" : "dataset",
                        s.repoId(), s.revision(), s.commit(), env.offline() ? "HF cache, offline" : "HF cache");
            }
        }
        out.flush();
        return fetched;
    }
}
