package dev.finetune.recipes.plan;

import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

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

    /**
     * Parses a memory size: {@code 80GiB}, {@code 80G} (also GiB), {@code 40 GB} (10⁹ bytes), {@code 512MiB}, or plain
     * bytes; the same reading as the recipe's {@code hardware.gpu_memory}. A card sold as "80 GB" holds 80 GiB.
     */
    static long parseSize(String text, String where) {
        Matcher m = SIZE.matcher(text.strip());
        if (!m.matches()) {
            throw new UserError(where, "not a memory size: '" + text + "'", "write it like 80GiB, 24GiB or 40GB");
        }
        double value = Double.parseDouble(m.group(1));
        String unit = m.group(2) == null ? "" : m.group(2).toLowerCase(Locale.ROOT);
        double scale = switch (unit) {
            case "", "b" -> 1;
            case "kb" -> 1e3;
            case "k", "kib" -> 1L << 10;
            case "mb" -> 1e6;
            case "m", "mib" -> 1L << 20;
            case "gb" -> 1e9;
            case "g", "gib" -> 1L << 30;
            case "tb" -> 1e12;
            case "t", "tib" -> 1L << 40;
            default -> throw new UserError(where, "unknown memory unit '" + m.group(2) + "' in '" + text + "'",
                    "use GiB, GB, MiB or MB");
        };
        if (value <= 0) {
            throw new UserError(where, "memory size must be positive, got '" + text + "'", "e.g. 80GiB");
        }
        return Math.round(value * scale);
    }

    Pattern SIZE = Pattern.compile("([0-9]+(?:\\.[0-9]+)?)\\s*([A-Za-z]+)?");
}
