package dev.finetune.adapters.peft;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.recipes.UserError;
import java.util.Map;
import java.util.Optional;

/**
 * LoRA on a mixture of experts, folded into the checkpoint's expert weights.
 *
 * <p>transformers 5 holds a layer's experts as two stacked parameters, {@code mlp.experts.gate_up_proj}
 * {@code [experts, 2·width, hidden]} and {@code mlp.experts.down_proj} {@code [experts, hidden, width]}, and PEFT
 * adapts each with one pair ({@code target_parameters}): A {@code [r·experts, in]}, B {@code [out, r·experts]}, expert
 * {@code e} owning A's rows {@code e·r ... e·r + r - 1} and B's columns {@code e, e + experts, ...}. Both pairs sit on
 * the one experts module, the second wrapped around the first, so their names ({@code mlp.experts.lora_A} and
 * {@code mlp.experts.base_layer.lora_A}) do not say which parameter each adapts: their shapes do. Released checkpoints
 * keep the experts one tensor each, as before transformers 5 fused them (Mixtral's {@code block_sparse_moe.experts.E.w1},
 * {@code w3}, {@code w2}; Qwen-MoE's {@code mlp.experts.E.gate_proj}, {@code up_proj}, {@code down_proj}), the gate half
 * of {@code gate_up_proj} first: the merge writes into whichever layout the base holds.
 */
final class ExpertLoraMerge {
    private ExpertLoraMerge() {}

    /** The decoder layer's prefix ({@code model.layers.3}) when {@code module} is an experts module PEFT adapted. */
    static Optional<String> layerOf(String module) {
        String stripped = module.endsWith(".base_layer") ? module.substring(0, module.length() - ".base_layer".length())
                : module;
        return stripped.endsWith(".mlp.experts")
                ? Optional.of(stripped.substring(0, stripped.length() - ".mlp.experts".length())) : Optional.empty();
    }

    /** The per-expert tensor names of one layer in a checkpoint: gate, up and down of expert {@code e}. */
    private record Layout(String block, String gate, String up, String down) {
        String name(String layer, int expert, String part) {
            return layer + "." + block + ".experts." + expert + "." + part + ".weight";
        }
    }

    private static final Layout[] LAYOUTS = {
        new Layout("block_sparse_moe", "w1", "w3", "w2"), new Layout("mlp", "gate_proj", "up_proj", "down_proj")};

    /**
     * Replaces in {@code merged} the expert weights of {@code layer} that the pair {@code a}, {@code b} adapts by their
     * merged values.
     */
    @SuppressWarnings("try") // the scopes only collect temporaries
    static void merge(Map<String, NDArray> merged, String layer, NDArray a, NDArray b, int r, double scaling,
            String where) {
        long experts = a.getShape().get(0) / r;
        long in = a.getShape().get(1);
        long out = b.getShape().get(0);
        if (a.getShape().get(0) != experts * r || b.getShape().get(1) != experts * r) {
            throw new UserError(where, layer + ".mlp.experts: lora_A " + a.getShape() + " and lora_B " + b.getShape()
                    + " are not rank " + r + " per expert", "merge the adapter the run saved, unchanged");
        }
        NDArray stackedGateUp = merged.get(layer + ".mlp.experts.gate_up_proj");
        NDArray stackedDown = merged.get(layer + ".mlp.experts.down_proj");
        if (stackedGateUp != null && stackedDown != null) {
            String name = fits(stackedGateUp, experts, out, in) ? layer + ".mlp.experts.gate_up_proj"
                    : fits(stackedDown, experts, out, in) ? layer + ".mlp.experts.down_proj" : null;
            if (name == null) {
                throw mismatch(layer, a, b, where);
            }
            NDArray stack = merged.get(name);
            NDArray[] rows = new NDArray[(int) experts];
            for (int e = 0; e < experts; e++) {
                try (NDScope temporaries = new NDScope()) {
                    rows[e] = add(stack.get(new NDIndex("{}", e)), delta(a, b, e, experts, r, scaling)).expandDims(0);
                    NDScope.unregister(rows[e]);
                }
            }
            merged.put(name, ai.djl.ndarray.NDArrays.concat(new ai.djl.ndarray.NDList(rows), 0));
            for (NDArray row : rows) {
                row.close();
            }
            return;
        }
        for (Layout layout : LAYOUTS) {
            NDArray gate = merged.get(layout.name(layer, 0, layout.gate()));
            NDArray down = merged.get(layout.name(layer, 0, layout.down()));
            if (gate == null || down == null) {
                continue;
            }
            long width = gate.getShape().get(0);
            boolean gateUp = in == gate.getShape().get(1) && out == 2 * width;
            if (!gateUp && !(in == down.getShape().get(1) && out == down.getShape().get(0))) {
                throw mismatch(layer, a, b, where);
            }
            for (int e = 0; e < experts; e++) {
                // one expert's update at a time: a released MoE's deltas would not fit in memory all at once
                try (NDScope temporaries = new NDScope()) {
                    NDArray d = delta(a, b, e, experts, r, scaling);
                    if (gateUp) {
                        replace(merged, layout.name(layer, e, layout.gate()), d.get(new NDIndex("0:{}, :", width)), where);
                        replace(merged, layout.name(layer, e, layout.up()), d.get(new NDIndex("{}:, :", width)), where);
                    } else {
                        replace(merged, layout.name(layer, e, layout.down()), d, where);
                    }
                }
            }
            return;
        }
        throw new UserError(where, "the adapter changes the experts of " + layer + " but the base model has neither "
                + layer + ".mlp.experts.gate_up_proj nor per-expert weights there",
                "merge into the model the adapter was trained on");
    }

    private static boolean fits(NDArray stack, long experts, long out, long in) {
        return stack.getShape().equals(new Shape(experts, out, in));
    }

    private static UserError mismatch(String layer, NDArray a, NDArray b, String where) {
        return new UserError(where, layer + ".mlp.experts: lora_A " + a.getShape() + " and lora_B " + b.getShape()
                + " fit none of the base model's expert weights", "merge into the model the adapter was trained on");
    }

    /** {@code scaling · B_e · A_e} in float32 (float64 stays float64): expert {@code e}'s {@code [out, in]} update. */
    private static NDArray delta(NDArray a, NDArray b, int e, long experts, int r, double scaling) {
        DataType compute = a.getDataType() == DataType.FLOAT64 ? DataType.FLOAT64 : DataType.FLOAT32;
        NDArray aE = a.get(new NDIndex("{}:{}, :", (long) e * r, (long) e * r + r)).toType(compute, false);
        // B's columns are rank-major: column k·experts + e belongs to expert e's k-th rank
        NDArray bE = b.reshape(b.getShape().get(0), r, experts).get(new NDIndex(":, :, {}", e)).toType(compute, false);
        return bE.matMul(aE).mul(a.getManager().full(new Shape(), (float) scaling, compute));
    }

    private static void replace(Map<String, NDArray> merged, String name, NDArray delta, String where) {
        NDArray weight = merged.get(name);
        if (weight == null || !weight.getShape().equals(delta.getShape())) {
            throw new UserError(where, "the adapter's expert update does not fit " + name + " in the base model",
                    "merge into the model the adapter was trained on");
        }
        merged.put(name, add(weight, delta));
    }

    /** The merged weight, kept when the caller's scope closes (it goes into the merged map). */
    private static NDArray add(NDArray weight, NDArray delta) {
        NDArray result = weight.toType(delta.getDataType(), false).add(delta).toType(weight.getDataType(), false);
        NDScope.unregister(result);
        return result;
    }
}
