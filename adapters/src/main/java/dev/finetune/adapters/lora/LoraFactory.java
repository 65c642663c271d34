package dev.finetune.adapters.lora;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.ProjectionFactory;
import dev.finetune.adapters.Scalars;
import dev.finetune.adapters.nf4.Nf4Projection;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.LoraTargets;
import dev.finetune.recipes.UserError;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * Builds the model's linear layers for LoRA and QLoRA training from the recipe's {@link AdapterSpec.Lora}.
 *
 * <p>Layers chosen by {@link TargetSelector} get a {@link LoraProjection}; the others stay frozen. With QLoRA every
 * linear layer except the output head is stored as NF4 (as bitsandbytes' {@code load_in_4bit} does), and the
 * factory closes the float weight it was given once it is packed. After the model is built, call
 * {@link #requireMatches()}: it returns what matched (for the trainer to print) or fails when nothing did.
 */
public final class LoraFactory implements ProjectionFactory {
    private final AdapterSpec.Lora spec;
    private final TargetSelector targets;
    private final NDManager parameters;
    private final Scalars scalars;
    private final long seed;
    private final AdapterSwitch adapters = new AdapterSwitch();
    private final List<String> built = new ArrayList<>();
    private final List<String> matched = new ArrayList<>();
    private final List<LoraProjection> projections = new ArrayList<>();

    /**
     * @param parameters the long-lived manager that will own the LoRA weights and the packed NF4 weights
     * @param seed the recipe's seed; each layer's A is drawn from it and the layer name
     */
    public LoraFactory(AdapterSpec.Lora spec, NDManager parameters, long seed) {
        this.spec = spec;
        this.targets = TargetSelector.of(spec);
        this.parameters = parameters;
        this.scalars = new Scalars(parameters);
        this.seed = seed;
    }

    /** The switch shared by every adapter this factory built (adapter on/off for references, dropout on/off). */
    public AdapterSwitch adapters() {
        return adapters;
    }

    @Override
    public Projection create(String name, NDArray weight, NDArray bias) {
        built.add(name);
        long out = weight.getShape().get(0);
        long in = weight.getShape().get(1);
        DataType type = weight.getDataType();
        Projection base = spec.quantized() && !TargetSelector.isOutputHead(name)
                ? Nf4Projection.quantize(name, weight, bias, spec.quantization(), parameters)
                : new PlainProjection(name, weight, bias, false);
        if (!targets.matches(name)) {
            return base;
        }
        matched.add(name);
        NDArray a = LoraProjection.initialA(name, spec.r(), in, seed, parameters, type);
        NDArray b = parameters.zeros(new Shape(out, spec.r()), type);
        NDScope.unregister(b); // a parameter, even if the model happens to be built inside a step scope
        float scaling = (float) spec.scaling();
        LoraProjection projection = new LoraProjection(base, a, b, scaling, scalars.of(scaling), spec.dropout(),
                adapters);
        projections.add(projection);
        return projection;
    }

    /**
     * Makes the current adapter weights the reference model ({@link AdapterSwitch#reference()}) from now on: call
     * it after loading a saved adapter that training continues, as TRL copies it to a frozen "ref" adapter.
     */
    public void freezeReference() {
        for (LoraProjection projection : projections) {
            projection.freezeReference(parameters);
        }
    }

    /**
     * The layers that got an adapter, in build order; a recipe that matched nothing, or whose target list has an entry
     * that matches no layer (a misspelt {@code q_prj}), is a {@link UserError}.
     */
    public List<String> requireMatches() {
        if (matched.isEmpty()) {
            String available = String.join(", ", shortNames(built));
            throw new UserError(targets.recipeKey(),
                    "matched none of the model's " + built.size() + " linear layers " + describe()
                            + "; this model has: " + available,
                    "list some of these names in lora_target_modules, or set lora_target_linear: true");
        }
        List<LoraTargets.Unmatched> unmatched = targets.unmatched(built);
        if (!unmatched.isEmpty()) {
            LoraTargets.Unmatched u = unmatched.get(0);
            throw new UserError("lora_target_modules", u.message("model"), u.hint(LoraTargets.shortNames(built)));
        }
        return Collections.unmodifiableList(matched);
    }

    /**
     * {@code target_modules} for adapter_config.json: the short names when they select exactly the matched layers
     * (what PEFT itself writes, and what vLLM expects), else an anchored regex of the full names.
     */
    public AdapterConfig.Targets peftTargets() {
        Set<String> shortNames = shortNames(matched);
        long selectedByShortName = built.stream().filter(n -> shortNames.contains(lastComponent(n))).count();
        if (selectedByShortName == matched.size()) {
            return new AdapterConfig.Targets.Names(List.copyOf(shortNames));
        }
        List<String> quoted = matched.stream().map(LoraFactory::pythonQuote).toList();
        return new AdapterConfig.Targets.Regex("^(?:" + String.join("|", quoted) + ")$");
    }

    private String describe() {
        List<String> parts = new ArrayList<>();
        if (spec.targetModules() != null && !spec.targetModules().isEmpty()) {
            parts.add("lora_target_modules " + spec.targetModules());
        }
        if (spec.targetAllLinear()) {
            parts.add("lora_target_linear: true");
        }
        return parts.isEmpty() ? "(no targets given)" : "(" + String.join(", ", parts) + ")";
    }

    private static Set<String> shortNames(List<String> layerNames) {
        Set<String> names = new TreeSet<>();
        for (String name : layerNames) {
            names.add(lastComponent(name));
        }
        return names;
    }

    private static String lastComponent(String name) {
        return name.substring(name.lastIndexOf('.') + 1);
    }

    /** Escapes a layer name for Python's {@code re}: every character except letters, digits and '_'. */
    private static String pythonQuote(String name) {
        StringBuilder quoted = new StringBuilder();
        for (char c : name.toCharArray()) {
            if (!Character.isLetterOrDigit(c) && c != '_') {
                quoted.append('\\');
            }
            quoted.append(c);
        }
        return quoted.toString();
    }
}
