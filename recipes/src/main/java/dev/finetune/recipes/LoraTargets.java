package dev.finetune.recipes;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.TreeSet;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * Which modules a {@code lora_target_modules} list names, by PEFT's rule: an entry names a module when it equals the
 * module's full name, is its last dotted component(s) ({@code q_proj} names {@code model.layers.0.self_attn.q_proj}),
 * or fully matches it as a regular expression. The plan checks the names against the architecture's modules and the
 * trainer against the modules it built, with this one rule.
 */
public final class LoraTargets {
    private final List<String> names;
    /** Per entry; {@code null} where the entry is no valid regex (it can still match literally). */
    private final List<Pattern> patterns;

    private LoraTargets(List<String> names, List<Pattern> patterns) {
        this.names = names;
        this.patterns = patterns;
    }

    public static LoraTargets of(List<String> targetModules) {
        List<String> names = targetModules == null ? List.of() : List.copyOf(targetModules);
        List<Pattern> patterns = new ArrayList<>();
        for (String name : names) {
            Pattern p;
            try {
                p = Pattern.compile(name);
            } catch (PatternSyntaxException e) {
                p = null;
            }
            patterns.add(p);
        }
        return new LoraTargets(names, patterns);
    }

    public List<String> names() {
        return names;
    }

    /** Whether entry {@code i} names {@code module}. */
    public boolean names(int i, String module) {
        String name = names.get(i);
        return module.equals(name) || module.endsWith("." + name)
                || (patterns.get(i) != null && patterns.get(i).matcher(module).matches());
    }

    /** Whether any entry names {@code module}. */
    public boolean matches(String module) {
        for (int i = 0; i < names.size(); i++) {
            if (names(i, module)) {
                return true;
            }
        }
        return false;
    }

    /** An entry that names none of the modules, with the closest module name when one is plausibly meant. */
    public record Unmatched(String target, String suggestion) {
        /** The error's message, for {@code modelKind} (e.g. "llama model"). */
        public String message(String modelKind) {
            return "lora_target_modules entry '" + target + "' matches no linear layer of this " + modelKind
                    + ": no adapter would be trained there";
        }

        /** The hint: the did-you-mean, and what there is to choose from. */
        public String hint(Collection<String> available) {
            String list = "this model's linear layers: " + String.join(", ", available);
            return suggestion != null ? "did you mean '" + suggestion + "'? (" + list + ")" : list;
        }
    }

    /** The entries that name none of {@code modules} (full module names), in the order written. */
    public List<Unmatched> unmatched(Collection<String> modules) {
        List<Unmatched> out = new ArrayList<>();
        List<String> shortNames = List.copyOf(shortNames(modules));
        for (int i = 0; i < names.size(); i++) {
            boolean found = false;
            for (String m : modules) {
                if (names(i, m)) {
                    found = true;
                    break;
                }
            }
            if (!found) {
                String name = names.get(i);
                String last = name.substring(name.lastIndexOf('.') + 1);
                out.add(new Unmatched(name, Suggestions.closest(last, shortNames)));
            }
        }
        return out;
    }

    /** The last dotted component of each module name, sorted and without repeats. */
    public static TreeSet<String> shortNames(Collection<String> modules) {
        TreeSet<String> out = new TreeSet<>();
        for (String m : modules) {
            out.add(m.substring(m.lastIndexOf('.') + 1));
        }
        return out;
    }
}
