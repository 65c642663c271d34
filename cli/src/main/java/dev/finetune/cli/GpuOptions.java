package dev.finetune.cli;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.plan.Devices;
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

    /** The GPUs given here, completed from the recipe's {@code hardware:}. */
    Devices resolve(Recipe r) {
        Recipe.Hardware.Gpus written = r.hardware() instanceof Recipe.Hardware.Gpus w ? w : null;
        int gpus = perNode != null ? perNode : written != null ? written.perNode() : 1;
        int machines = nodes != null ? nodes : written != null ? written.nodes() : 1;
        if (gpus < 1 || gpus > Recipe.Hardware.MAX_GPUS_PER_NODE) {
            throw new UserError("--gpus", "must be from 1 to " + Recipe.Hardware.MAX_GPUS_PER_NODE + " GPUs per node, got "
                    + gpus, "pass e.g. --gpus 8 (or --cpu to plan for this machine)");
        }
        if (machines < 1 || machines > Recipe.Hardware.MAX_NODES) {
            throw new UserError("--nodes", "must be from 1 to " + Recipe.Hardware.MAX_NODES + ", got " + machines,
                    "pass e.g. --nodes 2");
        }
        Long bytes = memory != null ? Long.valueOf(MemorySize.parse(memory, "--gpu-memory"))
                : written != null ? written.gpuMemoryBytes() : null;
        if (bytes == null) {
            throw new UserError("--gpu-memory", "the plan needs the memory of one GPU", "pass --gpu-memory 80GiB");
        }
        return Devices.gpus(gpus, machines, bytes);
    }
}
