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
        String log = outputDir.toAbsolutePath() + "/slurm-%j.out";
        if (log.chars().anyMatch(c -> c < 0x20 || c == 0x7f)) {
            // an #SBATCH line is read by sbatch, not by a shell: a line break in it would start a new line of script
            throw new dev.finetune.recipes.UserError("output_dir", "holds a control character (a line break?), which "
                    + "an sbatch script cannot carry", "choose an output_dir of plain characters");
        }
        List<String> common = new ArrayList<>();
        common.add(recipe.toString());
        common.addAll(overrides);
        // Every value reaches the program as one word, exactly as given: the node's launcher is started as "$@"
        // of a fixed bash -c script, never by pasting values into the script's text.
        List<String> onEachNode = new ArrayList<>(List.of(launcher));
        onEachNode.addAll(common);
        onEachNode.add("backend=fsdp");
        StringBuilder s = new StringBuilder();
        s.append("#!/usr/bin/env bash\n");
        s.append("#SBATCH --job-name=").append(jobName.replaceAll("[^A-Za-z0-9._-]", "-")).append('\n');
        s.append("#SBATCH --nodes=").append(launch.nnodes()).append('\n');
        s.append("#SBATCH --ntasks-per-node=1\n");
        s.append("#SBATCH --gpus-per-node=").append(launch.nprocPerNode()).append('\n');
        s.append("#SBATCH --exclusive\n");
        s.append("#SBATCH --output=").append(log).append('\n');
        s.append("# Written by finetune launch --slurm. Submit with: sbatch THIS_FILE\n");
        s.append("set -euo pipefail\n");
        s.append("head_node=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n");
        s.append("# Tokenize and pack once; every node's launcher then reuses the file.\n");
        s.append(ShellWords.quote(launcher)).append(" preprocess ").append(ShellWords.join(common)).append('\n');
        s.append("srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'exec \"$@\" --nnodes \"$SLURM_NNODES\"")
                .append(" --node-rank \"$SLURM_NODEID\" --nproc-per-node ").append(launch.nprocPerNode())
                .append(" --rdzv-endpoint \"$0:").append(PORT).append("\"' \"$head_node\" ")
                .append(ShellWords.join(onEachNode)).append('\n');
        return s.toString();
    }
}
