package dev.finetune.trainers.backend.fsdp;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * {@code finetune launch --slurm}: an sbatch script that runs a recipe over Slurm nodes. It preprocesses once on the
 * first node (the cache then serves every node), and srun starts one launcher per node; each runs torchrun for its
 * own GPUs and they meet at a c10d rendezvous on the first node. Node 0's launcher shows progress and writes the
 * metrics; the others only run their ranks.
 */
public final class SlurmScript {
    /** The rendezvous port on the first node. */
    public static final int PORT = 29500;

    private SlurmScript() {}

    /**
     * @param launcher the {@code finetune} command on the cluster's shared file system
     * @param recipe the recipe, absolute
     * @param overrides key=value overrides passed to every launcher
     */
    public static String render(String launcher, Path recipe, List<String> overrides, Launch launch, String jobName,
            Path outputDir) {
        List<String> common = new ArrayList<>();
        common.add(shell(recipe.toString()));
        overrides.forEach(o -> common.add(shell(o)));
        String args = String.join(" ", common);
        StringBuilder s = new StringBuilder();
        s.append("#!/usr/bin/env bash\n");
        s.append("#SBATCH --job-name=").append(jobName).append('\n');
        s.append("#SBATCH --nodes=").append(launch.nnodes()).append('\n');
        s.append("#SBATCH --ntasks-per-node=1\n");
        s.append("#SBATCH --gpus-per-node=").append(launch.nprocPerNode()).append('\n');
        s.append("#SBATCH --exclusive\n");
        s.append("#SBATCH --output=").append(outputDir.toAbsolutePath()).append("/slurm-%j.out\n");
        s.append("# Written by finetune launch --slurm. Submit with: sbatch THIS_FILE\n");
        s.append("set -euo pipefail\n");
        s.append("head_node=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n");
        s.append("# Tokenize and pack once; every node's launcher then reuses the file.\n");
        s.append(shell(launcher)).append(" preprocess ").append(args).append('\n');
        s.append("srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'exec ").append(launcher.replace("'", ""))
                .append(" ").append(args.replace("'", "")).append(" backend=fsdp --nnodes \"$SLURM_NNODES\"")
                .append(" --node-rank \"$SLURM_NODEID\" --nproc-per-node ").append(launch.nprocPerNode())
                .append(" --rdzv-endpoint \"$0:").append(PORT).append("\"' \"$head_node\"\n");
        return s.toString();
    }

    private static String shell(String text) {
        return text.matches("[A-Za-z0-9_./:=@%+,-]+") ? text : "'" + text.replace("'", "'\\''") + "'";
    }
}
