package dev.finetune.trainers.backend.fsdp;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code finetune launch --slurm}: an sbatch script that runs a recipe over Slurm nodes. It preprocesses once on the
 * first node (the cache then serves every node), and srun starts one launcher per node; each runs torchrun for its
 * own GPUs and they meet at a c10d rendezvous on the first node. Node 0's launcher shows progress and writes the
 * metrics; the others only run their ranks.
 *
 * <p>Each node's launcher gets every CPU the job holds on its node: srun (Slurm 22.05 and later) neither inherits
 * sbatch's {@code --cpus-per-task} nor reads {@code SLURM_CPUS_PER_TASK}, so without its own option it would give the
 * one task per node a single CPU and torchrun's ranks would share one core. The launcher then divides what it sees
 * among its ranks ({@link Launch#environment}). The NCCL and torch variables of {@link #DEFAULTS} are defaults only:
 * a value in the environment the job is submitted from wins.
 */
public final class SlurmScript {
    /** The rendezvous port on the first node. */
    public static final int PORT = 29500;

    /** What the script exports unless the submitting environment holds it (docs/multi-gpu.md, "Slurm"). */
    public static final Map<String, String> DEFAULTS = defaults();

    private SlurmScript() {}

    private static Map<String, String> defaults() {
        Map<String, String> d = new LinkedHashMap<>();
        // a failed or timed-out collective aborts its communicator and ends the rank (torch's own default, 3, ends
        // it without the abort): the node's launcher fails, and srun's --kill-on-bad-exit ends every other node's
        d.put("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
        // NCCL's warnings (a transport it fell back from, a network error) reach the job's log; INFO is the usual
        // setting for finding why a rendezvous or first collective hangs
        d.put("NCCL_DEBUG", "WARN");
        return java.util.Collections.unmodifiableMap(d);
    }

    /**
     * @param launcher the {@code finetune} command on the cluster's shared file system
     * @param recipe the recipe, absolute
     * @param overrides key=value overrides passed to every launcher
     * @param cpusPerTask {@code #SBATCH --cpus-per-task}, or null to leave it to Slurm (with {@code --exclusive}:
     *     every CPU of the node)
     */
    public static String render(String launcher, Path recipe, List<String> overrides, Launch launch, String jobName,
            Path outputDir, Integer cpusPerTask) {
        String log = outputDir.toAbsolutePath() + "/slurm-%j.out";
        if (log.chars().anyMatch(c -> c < 0x20 || c == 0x7f)) {
            // an #SBATCH line is read by sbatch, not by a shell: a line break in it would start a new line of script
            throw new dev.finetune.recipes.UserError("output_dir", "holds a control character (a line break?), which "
                    + "an sbatch script cannot carry", "choose an output_dir of plain characters");
        }
        if (cpusPerTask != null && cpusPerTask < 1) {
            throw new dev.finetune.recipes.UserError("--cpus-per-task", cpusPerTask + " is not a CPU count",
                    "give at least 1, or leave it out for every CPU of the node");
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
        if (cpusPerTask != null) {
            s.append("#SBATCH --cpus-per-task=").append(cpusPerTask).append('\n');
        }
        s.append("#SBATCH --gpus-per-node=").append(launch.nprocPerNode()).append('\n');
        s.append("#SBATCH --exclusive\n");
        s.append("#SBATCH --output=").append(log).append('\n');
        s.append("# Written by finetune launch --slurm. Submit with: sbatch THIS_FILE\n");
        s.append("# The variables below are defaults: one exported where you submit wins ")
                .append("(NCCL_DEBUG=INFO sbatch ...).\n")
                .append("# Site-specific ones (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) are yours to export: ")
                .append("docs/multi-gpu.md.\n");
        s.append("set -euo pipefail\n");
        DEFAULTS.forEach((name, value) -> s.append(": \"${").append(name).append(":=").append(value)
                .append("}\"; export ").append(name).append('\n'));
        // not "| head -n 1": under pipefail, scontrol still writing when head has exited dies of SIGPIPE (exit 141)
        // and takes the job with it
        s.append("nodes=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n");
        s.append("head_node=${nodes%%$'\\n'*}\n");
        s.append(": \"${head_node:?scontrol named no node of SLURM_JOB_NODELIST}\"\n");
        s.append("# srun (Slurm >= 22.05) gives its task 1 CPU unless told: each node's launcher gets what the job\n")
                .append("# holds there (--cpus-per-task if given, else the fewest CPUs any node has, ")
                .append("else this node's).\n");
        s.append("cpus=${SLURM_CPUS_PER_TASK:-}\n");
        s.append("if [ -z \"$cpus\" ]; then\n");
        s.append("  per_node=${SLURM_JOB_CPUS_PER_NODE:-}\n");
        s.append("  for count in ${per_node//,/ }; do\n");
        s.append("    count=${count%%(*}\n");
        s.append("    if [ -z \"$cpus\" ] || [ \"$count\" -lt \"$cpus\" ]; then cpus=$count; fi\n");
        s.append("  done\n");
        s.append("fi\n");
        s.append("cpus=${cpus:-${SLURM_CPUS_ON_NODE:?Slurm set no CPU count (SLURM_CPUS_ON_NODE): ")
                .append("run this with sbatch}}\n");
        s.append("# Tokenize and pack once; every node's launcher then reuses the file.\n");
        s.append(ShellWords.quote(launcher)).append(" preprocess ").append(ShellWords.join(common)).append('\n');
        // --export=ALL: the launchers see the variables above even where the job was submitted with --export=NONE
        // (srun would inherit that through SLURM_EXPORT_ENV)
        s.append("srun --ntasks-per-node=1 --kill-on-bad-exit=1 --export=ALL --cpus-per-task=\"$cpus\" ")
                .append("bash -c 'exec \"$@\" --nnodes \"$SLURM_NNODES\"")
                .append(" --node-rank \"$SLURM_NODEID\" --nproc-per-node ").append(launch.nprocPerNode())
                .append(" --rdzv-endpoint \"$0:").append(PORT).append("\"' \"$head_node\" ")
                .append(ShellWords.join(onEachNode)).append('\n');
        return s.toString();
    }
}
