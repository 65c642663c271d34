package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;

/**
 * What the model reads for one forward pass, all int64 {@code [B, T]}.
 *
 * @param positionIds restart at 0 for every packed example, so rotary positions never cross example boundaries
 * @param segmentIds 0 for padding, 1, 2, … for the examples packed into a row; attention stays within a segment
 */
public record ModelInputs(NDArray inputIds, NDArray positionIds, NDArray segmentIds) {}
