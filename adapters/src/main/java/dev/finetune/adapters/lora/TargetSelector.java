package dev.finetune.adapters.lora;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.LoraTargets;
import dev.finetune.recipes.UserError;
import java.util.List;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * Decides which linear layers get a LoRA adapter, matching names the way PEFT does.
 *
 * <p>An entry of {@code lora_target_modules} matches a layer when it equals the full name, is its last dotted
 * component(s) ({@code q_proj} matches {@code model.layers.0.self_attn.q_proj}), or fully matches it as a regular
 * expression (PEFT's {@code re.fullmatch} for a string target). {@code lora_target_linear} adds every linear layer
 * except the output head, as PEFT's {@code all-linear} does.
 */
public final class TargetSelector {
    private final List<String> names;
    private final LoraTargets targets;
    private final boolean allLinear;

    private TargetSelector(List<String> names, boolean allLinear) {
        this.names = names;
        this.targets = LoraTargets.of(names);
        this.allLinear = allLinear;
    }

    public static TargetSelector of(AdapterSpec.Lora spec) {
        List<String> names = spec.targetModules() == null ? List.of() : List.copyOf(spec.targetModules());
        for (String name : names) {
            try {
                Pattern.compile(name);
            } catch (PatternSyntaxException e) {
                throw new UserError("lora_target_modules", "'" + name + "' is neither a module name nor a valid"
                        + " regular expression: " + e.getDescription(),
                        "use a module name such as q_proj or a regex such as .*\\.(q|v)_proj");
            }
        }
        return new TargetSelector(names, spec.targetAllLinear());
    }

    /** The output head: never quantized, and adapted only when named explicitly. */
    public static boolean isOutputHead(String layerName) {
        return layerName.equals("lm_head") || layerName.endsWith(".lm_head");
    }

    /** The recipe key to blame when nothing matches. */
    public String recipeKey() {
        return names.isEmpty() && allLinear ? "lora_target_linear" : "lora_target_modules";
    }

    public boolean matches(String layerName) {
        return (allLinear && !isOutputHead(layerName)) || targets.matches(layerName);
    }

    /**
     * The named entries that match none of the layers the model built: the plan's check, on the real module names.
     */
    public List<LoraTargets.Unmatched> unmatched(List<String> builtLayers) {
        return targets.unmatched(builtLayers);
    }
}
