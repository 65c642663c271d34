package dev.finetune.adapters.peft;

import ai.djl.ndarray.NDArray;
import dev.finetune.adapters.NamedArray;
import dev.finetune.recipes.UserError;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/** Puts saved adapter tensors into a freshly built model's LoRA parameters (resume, generate with an adapter). */
public final class AdapterWeights {
    private AdapterWeights() {}

    /**
     * Copies every saved tensor into the parameter of the same name. Names must agree both ways: a missing or an
     * extra tensor means the adapter was trained with other target modules, and loading it partly would quietly
     * give a different model.
     */
    public static void load(List<NamedArray> parameters, Map<String, NDArray> saved, String where) {
        Set<String> expected = new TreeSet<>();
        for (NamedArray parameter : parameters) {
            expected.add(parameter.name());
        }
        Set<String> missing = new TreeSet<>(expected);
        missing.removeAll(saved.keySet());
        Set<String> extra = new TreeSet<>(saved.keySet());
        extra.removeAll(expected);
        if (!missing.isEmpty() || !extra.isEmpty()) {
            throw new UserError(where, "the adapter does not fit this model: "
                    + (missing.isEmpty() ? "" : "missing " + abbreviate(missing))
                    + (!missing.isEmpty() && !extra.isEmpty() ? "; " : "")
                    + (extra.isEmpty() ? "" : "unexpected " + abbreviate(extra)),
                    "use the recipe's lora_target_modules / lora_target_linear the adapter was trained with");
        }
        for (NamedArray parameter : parameters) {
            NDArray source = saved.get(parameter.name());
            if (!source.getShape().equals(parameter.array().getShape())) {
                throw new UserError(where, parameter.name() + " has shape " + source.getShape() + " in the file but "
                        + parameter.array().getShape() + " in the model",
                        "use the lora_r the adapter was trained with (adapter_config.json: r)");
            }
            try (NDArray converted = source.toType(parameter.array().getDataType(), true)) {
                converted.copyTo(parameter.array());
            }
        }
    }

    private static String abbreviate(Set<String> names) {
        List<String> list = List.copyOf(names);
        return list.size() <= 3 ? String.join(", ", list)
                : String.join(", ", list.subList(0, 3)) + " and " + (list.size() - 3) + " more";
    }
}
