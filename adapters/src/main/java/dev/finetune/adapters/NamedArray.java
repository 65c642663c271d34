package dev.finetune.adapters;

import ai.djl.ndarray.NDArray;

/** A tensor together with the name it has in a checkpoint file. */
public record NamedArray(String name, NDArray array) {}
