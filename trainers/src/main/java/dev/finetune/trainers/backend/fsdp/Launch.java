package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.UserError;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * How the fsdp backend starts its ranks: {@code torchrun} (run as {@code python -m torch.distributed.run}, the same
 * program, so it is certainly the chosen interpreter's) with one process per device on each node. How many ranks on
 * how many nodes is the resolved run's ({@link ResolvedRun}); this record adds what only the launch needs.
 *
 * @param run the run's ranks: {@link ResolvedRun#perNode} processes on each of {@link ResolvedRun#nodes} nodes
 * @param nodeRank this node's rank ({@code --node-rank})
 * @param rdzvEndpoint {@code HOST:PORT} of the c10d rendezvous, or null on one node
 * @param python {@code --python}, or null to look it up
 * @param dryRun print the command, environment and global batch identity, and start nothing
 */
public record Launch(ResolvedRun run, int nodeRank, String rdzvEndpoint, String python, boolean dryRun) {

    public Launch {
        if (run.backend() != ResolvedRun.Backend.FSDP) {
            throw new IllegalArgumentException("torchrun launches the fsdp backend, not " + run.backend());
        }
        if (nodeRank < 0 || nodeRank >= run.nodes()) {
            throw new UserError("--node-rank", nodeRank + " is not in 0.." + (run.nodes() - 1), "number the nodes from 0");
        }
        if (run.nodes() > 1 && (rdzvEndpoint == null || !rdzvEndpoint.contains(":"))) {
            throw new UserError("--rdzv-endpoint", "a run over " + run.nodes() + " nodes needs the rendezvous HOST:PORT",
                    "e.g. --rdzv-endpoint node001:29500 (the same on every node)");
        }
    }

    /** One node, this machine: how the tests and a plain {@code --nproc-per-node} run start. */
    public static Launch local(ResolvedRun run, String python) {
        return new Launch(run, 0, null, python, false);
    }

    public int nprocPerNode() {
        return run.perNode();
    }

    public int nnodes() {
        return run.nodes();
    }

    public int worldSize() {
        return run.worldSize();
    }

    /** Whether the ranks compute on CPU (gloo) rather than CUDA devices. */
    public boolean cpu() {
        return run.device() == ResolvedRun.Device.CPU;
    }

    /**
     * One process on one node: the worker is started as it is, without torchrun (it trains unsharded, at world size
     * 1); the launcher keeps its output in {@code worker/logs/rank0.log} as torchrun's {@code --tee} would.
     */
    public boolean direct() {
        return worldSize() == 1;
    }

    /**
     * The exact command line; {@code entry} is the worker's own copy ({@link WorkerPython.Code#entry}), {@code plan}
     * the worker plan, {@code logs} where torchrun tees each rank's output. torchrun and every rank run isolated
     * ({@code -I}): nothing in the working folder can stand in for {@code torch} or a module the worker imports.
     */
    public List<String> command(String interpreter, Path entry, Path plan, Path logs, String runId) {
        if (direct()) {
            // one process: nothing to rendezvous with or to restart, so no torchrun in between
            return WorkerPython.command(interpreter, entry, plan.toString());
        }
        List<String> command = new ArrayList<>(List.of(interpreter, "-I", "-m", "torch.distributed.run"));
        if (nnodes() == 1) {
            // a free port of its own: two runs on one machine never collide on 29500
            command.add("--standalone");
        } else {
            command.addAll(List.of("--nnodes", Integer.toString(nnodes()), "--node-rank", Integer.toString(nodeRank),
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzvEndpoint, "--rdzv-id", runId));
        }
        command.addAll(List.of("--nproc-per-node", Integer.toString(nprocPerNode()), "--tee", "3", "--log-dir",
                logs.toString(), "--no-python"));
        command.addAll(WorkerPython.command(interpreter, entry, plan.toString()));
        return command;
    }

    /**
     * The environment the ranks get beyond the caller's. {@code cores} are the CPUs this launcher may use (under srun,
     * what Slurm bound its task to); each rank gets an equal share of them as its thread count, unless
     * {@code inherited} (the launcher's own environment) sets {@code OMP_NUM_THREADS}, which then wins. torchrun's own
     * default, 1 per rank, would leave a GPU rank's CPU work (offloaded optimizer steps, clipping) on one core.
     */
    public Map<String, String> environment(int cores, Map<String, String> inherited) {
        boolean cpu = cpu();
        Map<String, String> env = new LinkedHashMap<>();
        env.put("TOKENIZERS_PARALLELISM", "false");
        // the launcher fetched every hub input and passes local paths: a rank never asks the hub
        env.put("HF_HUB_OFFLINE", "1");
        String threads = inherited.get("OMP_NUM_THREADS");
        env.put("OMP_NUM_THREADS", threads != null && !threads.isBlank() ? threads
                : Integer.toString(Math.max(1, cores / nprocPerNode())));
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
