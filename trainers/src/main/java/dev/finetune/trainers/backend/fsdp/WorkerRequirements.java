package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.UserError;
import java.util.Set;

/**
 * What the torch worker needs for a recipe, refused before anything is written: first what no interpreter could run
 * (an optimizer the worker does not have, bitsandbytes' state over several ranks or on the CPU), then, with the
 * interpreter's own report ({@code python -m finetune_worker check}), a GPU the recipe declares and bitsandbytes on
 * CUDA for QLoRA and for bitsandbytes' optimizers. Each refusal names what it saw and the fix.
 */
public final class WorkerRequirements {
    /** The GPU-only packages; CI installs none of them. */
    public static final String GPU_EXTRAS = "trainers/src/main/python/requirements-gpu.txt";
    /** The recipe's optimizers that are bitsandbytes' classes (the worker's extras.BNB_OPTIMIZERS). */
    static final Set<Recipe.Optimizer> BITSANDBYTES = Set.of(Recipe.Optimizer.ADAMW_BNB_8BIT,
            Recipe.Optimizer.ADAMW_8BIT, Recipe.Optimizer.PAGED_ADAMW_8BIT, Recipe.Optimizer.PAGED_ADAMW_32BIT);
    /** The ones that are torch's AdamW (fused on CUDA), as the worker builds it. */
    static final Set<Recipe.Optimizer> TORCH_ADAMW = Set.of(Recipe.Optimizer.ADAMW_TORCH,
            Recipe.Optimizer.ADAMW_TORCH_FUSED, Recipe.Optimizer.ADAMW_HF);

    private WorkerRequirements() {}

    /** The recipe's optimizer, as the worker plan names it. */
    static Recipe.Optimizer optimizer(Recipe recipe) {
        Recipe.Optimizer optimizer = recipe.training().optimizer();
        return optimizer != null ? optimizer : Recipe.Optimizer.ADAMW_TORCH;
    }

    /** What no interpreter could change: checked before the memory plan, and by {@code --dry-run}. */
    public static void requireRunnable(Recipe recipe, ResolvedRun run) {
        boolean gpu = run.device() == ResolvedRun.Device.CUDA;
        Recipe.Optimizer optimizer = optimizer(recipe);
        if (!TORCH_ADAMW.contains(optimizer) && !BITSANDBYTES.contains(optimizer)) {
            // without this the worker would silently train with AdamW
            throw new UserError("optimizer", "optimizer: " + optimizer.axolotlName() + " is not in the torch worker, "
                    + "which runs torch's AdamW and bitsandbytes' 8-bit and paged AdamW", "use optimizer: "
                    + (optimizer.stateBytesPerParam() < 8 ? "adamw_bnb_8bit" : "adamw_torch_fused"));
        }
        if (recipe.adapter() instanceof AdapterSpec.Lora lora && lora.quantized()) {
            if (run.worldSize() > 1) {
                throw new UserError("adapter", "QLoRA over " + run.worldSize() + " ranks: FSDP2 gathers bitsandbytes' "
                        + "4-bit weights back as plain tensors without their quantization state, so they cannot be "
                        + "sharded", "train QLoRA on one GPU (hardware: {gpus: 1}), or use adapter: lora with FSDP");
            }
            requireCuda("adapter: qlora", gpu, "or train on the CPU in this JVM (hardware: cpu, backend: single), "
                    + "which runs the same NF4");
        }
        if (BITSANDBYTES.contains(optimizer)) {
            if (run.worldSize() > 1) {
                throw new UserError("optimizer", optimizer.axolotlName() + " over " + run.worldSize() + " ranks: "
                        + "bitsandbytes' optimizers keep each tensor's whole state and FSDP2 hands them shards",
                        "use optimizer: adamw_torch_fused with FSDP, or " + optimizer.axolotlName() + " on one GPU");
            }
            requireCuda("optimizer: " + optimizer.axolotlName(), gpu, "or use optimizer: adamw_torch_fused");
        }
    }

    /**
     * What the interpreter must have: a CUDA device when the run computes on one, bitsandbytes where the recipe needs
     * it. {@code gpu}: the resolved run computes on CUDA devices.
     */
    public static void check(Recipe recipe, WorkerPython.Environment environment, String python, boolean gpu) {
        if (gpu && environment.cudaDevices() == 0) {
            throw new UserError("hardware", "the recipe runs on a CUDA GPU, and " + python + " has none: "
                    + environment.cudaReport(), "run it where torch sees the GPU (a CUDA build of torch: " + python
                    + " -m pip install torch from PyPI), or train on this machine's CPU with hardware: cpu");
        }
        if (recipe.adapter() instanceof AdapterSpec.Lora lora && lora.quantized()) {
            requireBitsandbytes("adapter: qlora", environment, python,
                    "or train on the CPU in this JVM (hardware: cpu, backend: single), which runs the same NF4");
        }
        Recipe.Optimizer optimizer = optimizer(recipe);
        if (BITSANDBYTES.contains(optimizer)) {
            requireBitsandbytes("optimizer: " + optimizer.axolotlName(), environment, python,
                    "or use optimizer: adamw_torch_fused");
        }
    }

    private static void requireCuda(String what, boolean gpu, String otherwise) {
        if (!gpu) {
            throw new UserError(what.substring(0, what.indexOf(':')), what + " on the torch worker needs bitsandbytes "
                    + "on a CUDA GPU, and this run computes on the CPU", "run it on a GPU (hardware: {gpus: 1}), "
                    + otherwise);
        }
    }

    private static void requireBitsandbytes(String what, WorkerPython.Environment environment, String python,
            String otherwise) {
        if (environment.bitsandbytes() == null) {
            throw new UserError(what.substring(0, what.indexOf(':')), what + " needs bitsandbytes, and " + python
                    + " cannot import it", python + " -m pip install bitsandbytes (all GPU extras: " + python
                    + " -m pip install -r " + GPU_EXTRAS + "), " + otherwise);
        }
    }
}
