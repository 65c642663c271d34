package dev.finetune.trainers.hub;

import dev.finetune.recipes.hub.RepoType;
import java.nio.file.Path;

/**
 * A hub repo resolved to one commit and present in the cache: what a run reads and what its provenance records.
 *
 * @param revision the revision as the recipe names it ({@code main} when it names none)
 * @param commit {@code null} for a local folder; else the 40-hex commit it resolved to: pinning it ({@code revision: <commit>}) reproduces the run's input
 * @param folder {@code snapshots/<commit>} in the HF cache
 */
public record Snapshot(RepoType type, String repoId, String revision, String commit, Path folder) {

    /** {@code org/name@abc1234}, for messages. */
    public String label() {
        return commit == null ? repoId : repoId + "@" + commit.substring(0, 7);
    }
}
