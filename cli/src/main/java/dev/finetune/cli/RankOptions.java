package dev.finetune.cli;

import dev.finetune.recipes.LaunchShape;
import picocli.CommandLine.Option;

/**
 * {@code --nproc-per-node N --nnodes M}: the ranks of an fsdp run, for training and {@code launch} (which start them)
 * and for {@code plan} (which sizes them), so the batch line and memory plan printed are those of the run.
 */
final class RankOptions {
    @Option(names = "--nproc-per-node", paramLabel = "N",
            description = "fsdp: processes on each node (default: hardware.gpus; on CPU, ranks over gloo).")
    Integer nprocPerNode;

    @Option(names = "--nnodes", paramLabel = "M", description = "fsdp: nodes (default: hardware.nodes).")
    Integer nnodes;

    /** What these flags ask of the run's shape; the recipe is resolved with it. */
    LaunchShape shape(LaunchShape hardware) {
        return hardware.withTorchrun(nprocPerNode, nnodes);
    }
}
