package dev.finetune.adapters.peft;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.recipes.UserError;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeSet;

/**
 * Folds a LoRA adapter into the base weights: {@code W' = W + scaling·B·A} for every adapted layer (per expert for
 * stacked MoE experts, {@link ExpertLoraMerge}), giving plain weights that any Hugging Face loader reads without PEFT.
 */
public final class LoraMerge {
    private LoraMerge() {}

    /**
     * @param base the base checkpoint, Hugging Face names ({@code model.layers.0.self_attn.q_proj.weight})
     * @param adapter the adapter's tensors, PEFT names ({@code base_model.model.<layer>.lora_A.weight})
     * @return the base map with every adapted weight replaced by its merged value (same names, same order, same
     *     dtype); untouched entries are the same arrays as in {@code base}. New arrays belong to each base
     *     weight's manager.
     */
    public static Map<String, NDArray> merge(Map<String, NDArray> base, AdapterConfig config,
            Map<String, NDArray> adapter, String adapterWhere) {
        Map<String, NDArray> merged = new LinkedHashMap<>(base);
        for (String module : modules(adapter, adapterWhere)) {
            NDArray a = require(adapter, PeftNames.loraA(module), adapterWhere);
            NDArray b = require(adapter, PeftNames.loraB(module), adapterWhere);
            java.util.Optional<String> expertsOf = ExpertLoraMerge.layerOf(module);
            if (expertsOf.isPresent()) {
                ExpertLoraMerge.merge(merged, expertsOf.get(), a, b, config.r(), config.scaling(), adapterWhere);
                continue;
            }
            String weightName = module + ".weight";
            // a router PEFT adapted as a parameter is named as transformers 5 names it; Mixtral's checkpoints keep
            // the older block name
            if (!base.containsKey(weightName) && weightName.contains(".mlp.gate.")) {
                weightName = weightName.replace(".mlp.gate.", ".block_sparse_moe.gate.");
            }
            NDArray weight = base.get(weightName);
            if (weight == null) {
                throw new UserError(adapterWhere, "the adapter changes " + module + " but the base model has no "
                        + weightName, "merge into the model the adapter was trained on ("
                        + config.baseModelNameOrPath() + ")");
            }
            Shape shape = weight.getShape();
            if (a.getShape().dimension() != 2 || b.getShape().dimension() != 2
                    || a.getShape().get(0) != config.r() || b.getShape().get(1) != config.r()
                    || a.getShape().get(1) != shape.get(1) || b.getShape().get(0) != shape.get(0)) {
                throw new UserError(adapterWhere, module + ": lora_A " + a.getShape() + " and lora_B " + b.getShape()
                        + " do not fit rank " + config.r() + " and the base weight " + shape,
                        "merge into the model the adapter was trained on (" + config.baseModelNameOrPath() + ")");
            }
            merged.put(weightName, mergedWeight(weight, a, b, config.scaling()));
        }
        return merged;
    }

    /** Sums in float32 (float64 stays float64) and casts back, so half-precision bases lose nothing extra. */
    @SuppressWarnings("try") // the scope only collects temporaries
    private static NDArray mergedWeight(NDArray weight, NDArray a, NDArray b, double scaling) {
        DataType compute = weight.getDataType() == DataType.FLOAT64 ? DataType.FLOAT64 : DataType.FLOAT32;
        try (NDScope temporaries = new NDScope()) {
            NDArray scale = weight.getManager().full(new Shape(), (float) scaling, compute);
            NDArray delta = b.toType(compute, false).matMul(a.toType(compute, false)).mul(scale);
            NDArray result = weight.toType(compute, false).add(delta).toType(weight.getDataType(), false);
            NDScope.unregister(result);
            return result;
        }
    }

    private static TreeSet<String> modules(Map<String, NDArray> adapter, String where) {
        TreeSet<String> modules = new TreeSet<>();
        for (String name : adapter.keySet()) {
            modules.add(PeftNames.moduleOf(name).orElseThrow(() -> new UserError(where,
                    "unexpected tensor " + name + " in a LoRA adapter",
                    "only base_model.model.<layer>.lora_A.weight / lora_B.weight tensors can be merged")));
        }
        return modules;
    }

    private static NDArray require(Map<String, NDArray> adapter, String name, String where) {
        NDArray array = adapter.get(name);
        if (array == null) {
            throw new UserError(where, "missing tensor " + name, "the adapter file is incomplete; save it again");
        }
        return array;
    }
}
