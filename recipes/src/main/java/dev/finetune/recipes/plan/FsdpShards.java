package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.model.ModelParameters;
import dev.finetune.recipes.model.ModelParameters.Tensor;
import java.util.List;
import java.util.Map;

/**
 * What the first rank holds of each parameter when FSDP2 shards it: dim 0 in {@code torch.chunk} pieces of
 * ⌈rows / ranks⌉ rows, and every rank's storage padded to that many rows (the first rank fills them; the last may hold
 * fewer, and its gradients and optimizer moments, made for its own rows, are then smaller). Where a dim 0 does not
 * divide (a LoRA A of 16 rows over 3 or 6 ranks, a 3584-wide Qwen2.5-7B over 3), this is more than the total divided by
 * the ranks: finetune_worker's {@code meta-terms} counts it so (WorkerMetaTermsTest), and the plan promises it.
 */
final class FsdpShards {
    private FsdpShards() {}

    /** Elements of the first rank's shards of every parameter over {@code ranks}. */
    static long total(ModelParameters p, int ranks) {
        return p.namedShapes().values().stream().mapToLong(shape -> firstShard(shape.get(0), rowSize(shape), ranks))
                .sum();
    }

    /**
     * {@link ModelParameters#trainable}'s first-rank shard over {@code ranks}: a LoRA pair is A {@code [r, in]} and B
     * {@code [out, r]}; on stacked experts {@code [experts, out, in]} PEFT's {@code ParamWrapper} makes one pair of
     * A {@code [r·experts, in]} and B {@code [out, r·experts]} (as PEFT 0.21 builds them on transformers 5's Mixtral).
     */
    static long trainable(ModelParameters p, AdapterSpec adapter, int ranks) {
        if (!(adapter instanceof AdapterSpec.Lora lora)) {
            return total(p, ranks);
        }
        long total = 0;
        for (Map.Entry<Tensor, Long> e : p.loraTargetLayers(adapter).entrySet()) {
            Tensor t = e.getKey();
            long r = (long) lora.r() * t.copies();
            total += e.getValue() * (firstShard(r, t.in(), ranks) + firstShard(t.out(), r, ranks));
        }
        return total;
    }

    private static long rowSize(List<Long> shape) {
        long size = 1;
        for (int i = 1; i < shape.size(); i++) {
            size *= shape.get(i);
        }
        return size;
    }

    private static long firstShard(long rows, long rowSize, int ranks) {
        return (rows + ranks - 1) / ranks * rowSize;
    }
}
