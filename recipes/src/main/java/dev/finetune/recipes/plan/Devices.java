package dev.finetune.recipes.plan;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The devices a plan is made for ({@link dev.finetune.recipes.ResolvedRun#devices}), with the memory of each known.
 * The recipe's {@link Recipe.Hardware} says what was written; this is what the plan computes with.
 *
 * @param gpu false for CPU processes, whose memory is the RAM of their machine, shared
 * @param perNode devices (or CPU ranks) on each of {@code nodes} machines
 * @param capacityPerDevice memory of one device in bytes
 */
public record Devices(boolean gpu, int perNode, int nodes, long capacityPerDevice) {

    public Devices {
        if (gpu && (perNode < 1 || nodes < 1 || capacityPerDevice <= 0)) {
            throw new UserError("hardware", "gpus, nodes and gpu_memory must be positive (got " + perNode
                    + " GPUs × " + nodes + " nodes, " + capacityPerDevice + " bytes)", "e.g. --gpus 8 --nodes 1 --gpu-memory 80GiB");
        }
    }

    /** {@code gpusPerNode} GPUs of {@code memoryPerGpu} bytes on each of {@code nodes} machines. */
    public static Devices gpus(int gpusPerNode, int nodes, long memoryPerGpu) {
        return new Devices(true, gpusPerNode, nodes, memoryPerGpu);
    }

    /** A CPU with {@code ram} bytes. */
    public static Devices cpu(long ram) {
        return new Devices(false, 1, 1, ram);
    }

    /**
     * {@code perNode} CPU processes on each of {@code nodes} machines of {@code ram} bytes: the ranks of one machine
     * share its memory, so each may count on its share.
     */
    public static Devices cpuRanks(int perNode, int nodes, long ram) {
        return new Devices(false, perNode, nodes, ram / perNode);
    }

    /** Devices available for data-parallel ranks. */
    public int devices() {
        return perNode * nodes;
    }

    public boolean onCpu() {
        return !gpu;
    }

    public String label() {
        if (!gpu) {
            return devices() == 1 ? "CPU, " + Bytes.gib(capacityPerDevice) + " GiB RAM"
                    : (nodes == 1 ? "" : nodes + " nodes × ") + perNode + " CPU ranks (gloo) × "
                            + Bytes.gib(capacityPerDevice) + " GiB RAM each";
        }
        String each = Bytes.gib(capacityPerDevice) + " GiB";
        return nodes == 1 ? perNode + " GPU" + (perNode == 1 ? "" : "s") + " × " + each
                : nodes + " nodes × " + perNode + " GPUs × " + each;
    }

    /** The RAM of this machine ({@code MemTotal} in /proc/meminfo). */
    public static Devices thisMachine() {
        return cpu(memTotal(Path.of("/proc/meminfo")));
    }

    static long memTotal(Path meminfo) {
        try {
            for (String line : Files.readAllLines(meminfo)) {
                if (line.startsWith("MemTotal:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
                }
            }
        } catch (IOException | NumberFormatException e) {
            // Fall through to the error below: without the RAM size there is no capacity to compare with.
        }
        throw new UserError(meminfo.toString(), "cannot read this machine's memory size (MemTotal)",
                "give the hardware instead: --gpus N --gpu-memory 80GiB");
    }
}
