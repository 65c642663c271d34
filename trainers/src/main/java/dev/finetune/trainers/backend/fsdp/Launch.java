package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * How the fsdp backend starts its ranks: {@code torchrun} (run as {@code python -m torch.distributed.run}, the same
 * program, so it is certainly the chosen interpreter's) with one process per device on each node.
 *
 * @param nprocPerNode processes on this node ({@code --nproc-per-node}); GPUs per node, or CPU processes over gloo
 * @param nnodes nodes ({@code --nnodes}); above 1 the rendezvous needs {@code rdzvEndpoint}
 * @param nodeRank this node's rank ({@code --node-rank})
 * @param rdzvEndpoint {@code HOST:PORT} of the c10d rendezvous, or null on one node
 * @param python {@code --python}, or null to look it up
 * @param dryRun print the command, environment and global batch identity, and start nothing
 */
public record Launch(int nprocPerNode, int nnodes, int nodeRank, String rdzvEndpoint, String python, boolean dryRun) {

    public Launch {
        if (nprocPerNode < 1) {
            throw new UserError("--nproc-per-node", "must be at least 1, got " + nprocPerNode, "e.g. --nproc-per-node 2");
        }
        if (nnodes < 1) {
            throw new UserError("--nnodes", "must be at least 1, got " + nnodes, "e.g. --nnodes 2");
        }
        if (nodeRank < 0 || nodeRank >= nnodes) {
            throw new UserError("--node-rank", nodeRank + " is not in 0.." + (nnodes - 1), "number the nodes from 0");
        }
        if (nnodes > 1 && (rdzvEndpoint == null || !rdzvEndpoint.contains(":"))) {
            throw new UserError("--rdzv-endpoint", "a run over " + nnodes + " nodes needs the rendezvous HOST:PORT",
                    "e.g. --rdzv-endpoint node001:29500 (the same on every node)");
        }
    }

    public int worldSize() {
        return nprocPerNode * nnodes;
    }

    /**
     * What the command line says, filling in from the recipe's {@code hardware} what it leaves open: GPUs per node and
     * nodes, or one process on CPU.
     */
    public static Launch resolve(Recipe recipe, Integer nprocPerNode, Integer nnodes, Integer nodeRank,
            String rdzvEndpoint, String python, boolean dryRun) {
        int perNode = 1;
        int nodes = 1;
        if (recipe.hardware() instanceof Recipe.Hardware.Gpus gpus) {
            perNode = gpus.perNode();
            nodes = gpus.nodes();
        }
        return new Launch(nprocPerNode != null ? nprocPerNode : perNode, nnodes != null ? nnodes : nodes,
                nodeRank != null ? nodeRank : 0, rdzvEndpoint, python, dryRun);
    }

    /**
     * The exact command line; {@code entry} is the worker's own copy ({@link WorkerPython.Code#entry}), {@code plan}
     * the worker plan, {@code logs} where torchrun tees each rank's output. torchrun and every rank run isolated
     * ({@code -I}): nothing in the working folder can stand in for {@code torch} or a module the worker imports.
     */
    public List<String> command(String interpreter, Path entry, Path plan, Path logs, String runId) {
        List<String> command = new ArrayList<>(List.of(interpreter, "-I", "-m", "torch.distributed.run"));
        if (nnodes == 1) {
            // a free port of its own: two runs on one machine never collide on 29500
            command.add("--standalone");
        } else {
            command.addAll(List.of("--nnodes", Integer.toString(nnodes), "--node-rank", Integer.toString(nodeRank),
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzvEndpoint, "--rdzv-id", runId));
        }
        command.addAll(List.of("--nproc-per-node", Integer.toString(nprocPerNode), "--tee", "3", "--log-dir",
                logs.toString(), "--no-python"));
        command.addAll(WorkerPython.command(interpreter, entry, plan.toString()));
        return command;
    }

    /** The environment the ranks get beyond the caller's: on CPU a fair share of the cores per rank. */
    public Map<String, String> environment(boolean cpu, int cores) {
        Map<String, String> env = new LinkedHashMap<>();
        env.put("TOKENIZERS_PARALLELISM", "false");
        env.put("OMP_NUM_THREADS", Integer.toString(Math.max(1, cpu ? cores / nprocPerNode : 4)));
        if (cpu) {
            env.put("FINETUNE_DEVICE", "cpu");
        }
        return env;
    }

    /** The rendezvous id of a run: the same on every node, different for another output_dir. */
    static String runId(Recipe recipe) {
        return "finetune-" + Integer.toHexString(Path.of(recipe.output().outputDir()).toAbsolutePath().hashCode());
    }
}
