package dev.finetune.recipes.plan;

/**
 * A change to the setup, with what it costs and the estimate it leads to.
 *
 * @param change what to edit, in recipe terms
 * @param cost what the change gives up
 */
public record Remedy(String change, String cost, MemoryEstimate result) {}
