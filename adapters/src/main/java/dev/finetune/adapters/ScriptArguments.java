package dev.finetune.adapters;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

/**
 * The tensors a layer compiled into one TorchScript module reads, collected while its source is written: each
 * becomes an argument of the module's {@code forward}, passed anew on every call.
 */
public interface ScriptArguments {

    /** The name under which the module receives {@code tensor}; the same tensor always gets the same name. */
    String tensor(NDArray tensor);

    /**
     * {@code weight} as an operand of a matrix multiply, in the module's compute dtype: the tensor itself, or under
     * bfloat16 mixed precision its bfloat16 copy, made inside the module (the engine must never see a bfloat16
     * array, docs/engine-facts.md) so autograd casts its gradient back to the float32 weight.
     */
    default String operand(NDArray weight) {
        return tensor(weight);
    }

    /** Where arrays made for this one call belong (a dequantized weight), closed with the caller's scope. */
    NDManager manager();
}
