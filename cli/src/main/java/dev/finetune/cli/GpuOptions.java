package dev.finetune.cli;

import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.plan.MemorySize;
import picocli.CommandLine.Option;

/** {@code --gpus N --nodes M --gpu-memory SIZE}: the hardware to plan for, each default taken from the recipe's. */
final class GpuOptions {
    @Option(names = "--gpus", paramLabel = "N", description = "GPUs per node (default: the recipe's, else 1)")
    Integer perNode;

    @Option(names = "--nodes", paramLabel = "M", description = "nodes (default: the recipe's, else 1)")
    Integer nodes;

    @Option(names = "--gpu-memory", paramLabel = "SIZE", description = "memory of one GPU, e.g. 80GiB (default: the recipe's)")
    String memory;

    /** The GPUs given here; {@link dev.finetune.recipes.ResolvedRun} completes them from the recipe's hardware. */
    LaunchShape shape() {
        return LaunchShape.gpus(perNode, nodes, memory != null ? Long.valueOf(MemorySize.parse(memory, "--gpu-memory"))
                : null);
    }
}
