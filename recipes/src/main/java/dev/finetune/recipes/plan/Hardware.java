package dev.finetune.recipes.plan;

import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** Where the run executes, and how much memory one device has. */
public sealed interface Hardware {

    /** Devices available for data-parallel ranks. */
    int devices();

    /** Memory of one device in bytes. */
    long capacityPerDevice();

    String label();

    /** GPUs: {@code gpusPerNode} on each of {@code nodes} machines. */
    record Gpus(int gpusPerNode, int nodes, long memoryPerGpu) implements Hardware {
        public Gpus {
            if (gpusPerNode < 1 || nodes < 1 || memoryPerGpu <= 0) {
                throw new UserError("hardware", "gpus, nodes and gpu_memory must be positive (got " + gpusPerNode
                        + " GPUs × " + nodes + " nodes, " + memoryPerGpu + " bytes)", "e.g. --gpus 8 --nodes 1 --gpu-memory 80GiB");
            }
        }

        public int devices() {
            return gpusPerNode * nodes;
        }

        public long capacityPerDevice() {
            return memoryPerGpu;
        }

        public String label() {
            String each = Bytes.gib(memoryPerGpu) + " GiB";
            return nodes == 1 ? gpusPerNode + " GPU" + (gpusPerNode == 1 ? "" : "s") + " × " + each
                    : nodes + " nodes × " + gpusPerNode + " GPUs × " + each;
        }
    }

    /** This machine's CPU and RAM: one device whose memory is the RAM. */
    record Cpu(long ram) implements Hardware {
        public int devices() {
            return 1;
        }

        public long capacityPerDevice() {
            return ram;
        }

        public String label() {
            return "CPU, " + Bytes.gib(ram) + " GiB RAM";
        }
    }

    /** The RAM of this machine ({@code MemTotal} in /proc/meminfo). */
    static Cpu thisMachine() {
        return new Cpu(memTotal(Path.of("/proc/meminfo")));
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
