package dev.finetune.recipes;

/**
 * How the command line shapes a run, beside the recipe's {@code hardware:}: the launch flags of training
 * ({@code --nproc-per-node}, {@code --nnodes}) and the hardware flags of {@code plan} and {@code validate --plan}
 * ({@code --gpus}, {@code --nodes}, {@code --gpu-memory}, {@code --cpu}). {@link ResolvedRun} turns it and the recipe
 * into the run's decisions; {@code null} means "not given": the recipe's value holds.
 *
 * @param nprocPerNode {@code --nproc-per-node}: processes on each node (torchrun's)
 * @param nnodes {@code --nnodes}
 * @param gpus {@code --gpus}: GPUs per node to plan for
 * @param gpuNodes {@code --nodes}
 * @param gpuMemory {@code --gpu-memory}, bytes per GPU
 * @param cpu {@code --cpu}: plan for this machine's CPU whatever the recipe says
 */
public record LaunchShape(Integer nprocPerNode, Integer nnodes, Integer gpus, Integer gpuNodes, Long gpuMemory,
        boolean cpu) {

    /** Nothing given: the recipe's {@code hardware:} and {@code backend:} decide. */
    public static final LaunchShape RECIPE = new LaunchShape(null, null, null, null, null, false);

    public LaunchShape {
        requireCount("--nproc-per-node", nprocPerNode, Recipe.Hardware.MAX_GPUS_PER_NODE, "e.g. --nproc-per-node 2");
        requireCount("--nnodes", nnodes, Recipe.Hardware.MAX_NODES, "e.g. --nnodes 2");
        requireCount("--gpus", gpus, Recipe.Hardware.MAX_GPUS_PER_NODE,
                "pass e.g. --gpus 8 (or --cpu to plan for this machine)");
        requireCount("--nodes", gpuNodes, Recipe.Hardware.MAX_NODES, "pass e.g. --nodes 2");
        if (gpuMemory != null && gpuMemory <= 0) {
            throw new UserError("--gpu-memory", "must be positive, got " + gpuMemory + " bytes", "e.g. --gpu-memory 80GiB");
        }
        if (cpu && (gpus != null || gpuNodes != null || gpuMemory != null)) {
            throw new UserError("--cpu", "plans for this machine's CPU, and --gpus/--nodes/--gpu-memory for GPUs",
                    "keep one of them");
        }
    }

    /** Training's launch flags. */
    public static LaunchShape torchrun(Integer nprocPerNode, Integer nnodes) {
        return new LaunchShape(nprocPerNode, nnodes, null, null, null, false);
    }

    /** {@code plan --gpus N --nodes M --gpu-memory SIZE}, each {@code null} when not given. */
    public static LaunchShape gpus(Integer perNode, Integer nodes, Long memory) {
        return new LaunchShape(null, null, perNode, nodes, memory, false);
    }

    /** The same shape with training's launch flags added. */
    public LaunchShape withTorchrun(Integer processesPerNode, Integer nodeCount) {
        return new LaunchShape(processesPerNode, nodeCount, gpus, gpuNodes, gpuMemory, cpu);
    }

    /** {@code --nproc-per-node} or {@code --nnodes} given: a request for the torchrun launcher. */
    public boolean asksForTorchrun() {
        return nprocPerNode != null || nnodes != null;
    }

    /** Whether any of the hardware flags ({@code --gpus}, {@code --nodes}, {@code --gpu-memory}) was given. */
    public boolean namesGpus() {
        return gpus != null || gpuNodes != null || gpuMemory != null;
    }

    private static void requireCount(String flag, Integer value, int max, String hint) {
        if (value != null && (value < 1 || value > max)) {
            throw new UserError(flag, "must be from 1 to " + max + ", got " + value, hint);
        }
    }
}
