package dev.finetune.trainers.backend;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

/** What this machine's CPU can do, as its kernel reports it in {@code /proc/cpuinfo}. */
final class CpuFeatures {
    /** AVX-512 BF16 (Cooper Lake, Zen 4 and later) or AMX (Sapphire Rapids and later): bfloat16 matmuls in hardware. */
    private static final Set<String> BFLOAT16 = Set.of("avx512_bf16", "amx_bf16");

    private CpuFeatures() {}

    /**
     * Whether the CPU multiplies bfloat16 in hardware; without it torch converts to float32 around every op and a
     * bf16 run is slower than a float32 one. Unknown (no {@code /proc/cpuinfo}) reads as yes: only warnings depend
     * on it.
     */
    static boolean bfloat16Units() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
                if (line.startsWith("flags")) {
                    for (String flag : line.substring(line.indexOf(':') + 1).trim().split("\\s+")) {
                        if (BFLOAT16.contains(flag)) {
                            return true;
                        }
                    }
                    return false;
                }
            }
        } catch (IOException | RuntimeException e) {
            return true;
        }
        return true;
    }
}
