package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;

/**
 * What the torch worker needs for a recipe from the machine, refused before anything is written. What no interpreter
 * could run (an optimizer the worker does not have, bitsandbytes' state over several ranks or on the CPU) validate
 * refuses already (recipes' RunChecks); here, with the interpreter's own report ({@code python -m finetune_worker check}), a GPU the recipe declares and bitsandbytes on
 * CUDA for QLoRA and for bitsandbytes' optimizers. Each refusal names what it saw and the fix.
 */
public final class WorkerRequirements {
    /** The GPU-only packages; CI installs none of them. */
    public static final String GPU_EXTRAS = "trainers/src/main/python/requirements-gpu.txt";
    private WorkerRequirements() {}

    /** The recipe's optimizer, as the worker plan names it. */
    static Optimizer optimizer(Recipe recipe) {
        Optimizer optimizer = recipe.training().optimizer();
        return optimizer != null ? optimizer : Optimizer.ADAMW_TORCH;
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
        Optimizer optimizer = optimizer(recipe);
        if (optimizer.bitsAndBytes()) { // the worker's extras.BNB_OPTIMIZERS
            requireBitsandbytes("optimizer: " + optimizer.axolotlName(), environment, python,
                    "or use optimizer: adamw_torch_fused");
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
