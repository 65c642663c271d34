package dev.finetune.cli;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.backend.fsdp.Launch;
import picocli.CommandLine.Option;

/** The torchrun options of the fsdp backend, shared by training and {@code launch}. */
final class LaunchOptions {
    @Option(names = "--nproc-per-node", paramLabel = "N",
            description = "fsdp: processes on this node (default: hardware.gpus; on CPU, ranks over gloo).")
    Integer nprocPerNode;

    @Option(names = "--nnodes", paramLabel = "M", description = "fsdp: nodes (default: hardware.nodes).")
    Integer nnodes;

    @Option(names = "--node-rank", paramLabel = "K", description = "fsdp: this node's rank, 0..M-1.")
    Integer nodeRank;

    @Option(names = "--rdzv-endpoint", paramLabel = "HOST:PORT",
            description = "fsdp: the c10d rendezvous of a multi-node run (the same on every node).")
    String rdzvEndpoint;

    @Option(names = "--python", paramLabel = "PYTHON",
            description = "fsdp: the interpreter (default: FINETUNE_PYTHON, .venv/bin/python beside the launcher, python3).")
    String python;

    @Option(names = "--dry-run", description = "fsdp: print the torchrun command, environment and global batch; start nothing.")
    boolean dryRun;

    Launch launch(Recipe recipe) {
        return Launch.resolve(recipe, nprocPerNode, nnodes, nodeRank, rdzvEndpoint, python, dryRun);
    }

    /** The single-device backend takes none of these: saying so beats ignoring them. */
    void requireUnused() {
        if (nprocPerNode != null || nnodes != null || nodeRank != null || rdzvEndpoint != null || dryRun) {
            throw new UserError("backend", "--nproc-per-node, --nnodes, --node-rank, --rdzv-endpoint and --dry-run "
                    + "belong to the fsdp backend, and this recipe runs on the single-device one",
                    "add backend=fsdp to the command line (or backend: fsdp to the recipe)");
        }
    }
}
