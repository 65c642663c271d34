package dev.finetune.cli;

import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.backend.fsdp.Launch;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/** The torchrun options of the fsdp backend, shared by training and {@code launch}. */
final class LaunchOptions {
    @Mixin
    RankOptions ranks = new RankOptions();

    @Option(names = "--node-rank", paramLabel = "K", description = "fsdp: this node's rank, 0..M-1.")
    Integer nodeRank;

    @Option(names = "--rdzv-endpoint", paramLabel = "HOST:PORT",
            description = "fsdp: the c10d rendezvous of a multi-node run (the same on every node).")
    String rdzvEndpoint;

    @Option(names = "--python", paramLabel = "PYTHON",
            description = "fsdp: the interpreter (default: FINETUNE_PYTHON, .venv/bin/python beside the launcher, python3).")
    String python;

    @Option(names = "--dry-run", description = "Print which trainer runs on which device, the plan and, for the torch "
            + "worker, its command, environment and global batch; start nothing.")
    boolean dryRun;

    /** What these flags ask of the run's shape; the recipe is resolved with it ({@link ResolvedRun}). */
    LaunchShape shape() {
        return ranks.shape(LaunchShape.RECIPE);
    }

    /** How this node starts the resolved run's ranks. */
    Launch launch(ResolvedRun run) {
        return new Launch(run, nodeRank != null ? nodeRank : 0, rdzvEndpoint, python, dryRun);
    }

    /**
     * The single-device backend takes none of the node's flags: saying so beats ignoring them (the resolution already
     * refuses {@code --nproc-per-node} and {@code --nnodes} there). {@code --dry-run} it takes.
     */
    void requireUnused() {
        if (nodeRank != null || rdzvEndpoint != null) {
            throw new UserError("backend", "--node-rank and --rdzv-endpoint belong to the fsdp backend, and "
                    + "this recipe runs on the single-device one",
                    "add backend=fsdp to the command line (or backend: fsdp to the recipe)");
        }
    }
}
