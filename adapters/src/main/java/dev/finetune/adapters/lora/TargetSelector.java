package dev.finetune.adapters.lora;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.UserError;
import java.util.ArrayList;
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
    private final List<Pattern> patterns;
    private final boolean allLinear;

    private TargetSelector(List<String> names, List<Pattern> patterns, boolean allLinear) {
        this.names = names;
        this.patterns = patterns;
        this.allLinear = allLinear;
    }

    public static TargetSelector of(AdapterSpec.Lora spec) {
        List<String> names = spec.targetModules() == null ? List.of() : List.copyOf(spec.targetModules());
        List<Pattern> patterns = new ArrayList<>();
        for (String name : names) {
            try {
                patterns.add(Pattern.compile(name));
            } catch (PatternSyntaxException e) {
                throw new UserError("lora_target_modules", "'" + name + "' is neither a module name nor a valid"
                        + " regular expression: " + e.getDescription(),
                        "use a module name such as q_proj or a regex such as .*\\.(q|v)_proj");
            }
        }
        return new TargetSelector(names, List.copyOf(patterns), spec.targetAllLinear());
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
        if (allLinear && !isOutputHead(layerName)) {
            return true;
        }
        for (int i = 0; i < names.size(); i++) {
            String name = names.get(i);
            if (layerName.equals(name) || layerName.endsWith("." + name) || patterns.get(i).matcher(layerName).matches()) {
                return true;
            }
        }
        return false;
    }
}
