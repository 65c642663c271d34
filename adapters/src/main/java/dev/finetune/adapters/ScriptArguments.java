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

    /** Where arrays made for this one call belong (a dequantized weight), closed with the caller's scope. */
    NDManager manager();
}
