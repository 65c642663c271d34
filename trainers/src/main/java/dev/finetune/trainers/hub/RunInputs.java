package dev.finetune.trainers.hub;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Everything a run reads from the hub, fetched into the HF cache once, at its start, before the plan (which then
 * reads the model's own config.json) and before anything is written: the model, a separate tokenizer, and every
 * hub dataset. On the fsdp backend this runs in each node's launcher, so the ranks get local paths and never fetch.
 */
public final class RunInputs {
    private RunInputs() {}

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
