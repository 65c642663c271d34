package dev.finetune.cli;

import dev.finetune.recipes.Finding;
import dev.finetune.recipes.InvalidRecipe;
import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.RecipeKeys;
import dev.finetune.recipes.RecipeLoader;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.YamlNode;
import dev.finetune.recipes.plan.Devices;
import dev.finetune.recipes.plan.MemoryEstimate;
import dev.finetune.recipes.plan.MemoryPlan;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Checks one recipe file for {@code validate}: every error and warning with its file, line, column and key, and
 * with {@code --plan} the memory verdict on the hardware the recipe declares or the command line names.
 */
final class RecipeCheck {

    private static final Pattern FILE_LINE_COLUMN = Pattern.compile("(.+):(\\d+):(\\d+)");
    private static final Pattern OVERRIDE = Pattern.compile("override '([^=']+)=.*'", Pattern.DOTALL);
    private static final Pattern KEY = Pattern.compile("[A-Za-z_][A-Za-z0-9_]*(\\[\\d*\\])?(\\.[A-Za-z_][A-Za-z0-9_]*(\\[\\d*\\])?)*");
    private static final double GIB = 1024.0 * 1024.0 * 1024.0;

    enum Severity { ERROR, WARNING }

    /**
     * One finding, located. {@code where} is as the recipe reader wrote it; {@code file} is where it points (a
     * {@code base:} file, or the recipe itself when the finding names no line); {@code line}, {@code column} and
     * {@code key} are {@code null} when unknown.
     */
    record Located(Path recipe, String where, String file, Integer line, Integer column, String key,
            Severity severity, String message, String hint) {

        /** {@code where: message (hint: ...)}, exactly as a single recipe's error always read. */
        String oneLine() {
            return new UserError(where, message, hint).oneLine();
        }
    }

    /** The memory verdict of {@code --plan}. */
    record Memory(long peakBytes, long capacityBytes, String peakPhase, String hardware, boolean fits) {
        String describe() {
            return String.format(Locale.ROOT, "memory: peak %.2f GiB per device in %s, capacity %.1f GiB (%s): %s",
                    peakBytes / GIB, peakPhase, capacityBytes / GIB, hardware, fits ? "fits" : "does not fit");
        }
    }

    /**
     * What {@code validate} found in one file.
     *
     * @param validated the resolved recipe, {@code null} when invalid or a fragment
     * @param memory {@code null} without {@code --plan} or when the plan could not be made
     */
    record Verdict(Path recipe, boolean fragment, List<Located> findings, ValidatedRecipe validated, Memory memory) {
        boolean valid() {
            return !fragment && errors() == 0;
        }

        long errors() {
            return findings.stream().filter(f -> f.severity() == Severity.ERROR).count();
        }

        long warnings() {
            return findings.stream().filter(f -> f.severity() == Severity.WARNING).count();
        }
    }

    private RecipeCheck() {}

    static Verdict fragment(Path file) {
        return new Verdict(file, true, List.of(), null, null);
    }

    /**
     * Reads the recipe once (with its {@code base:} files and the overrides) and validates it.
     *
     * @param shape the command line's {@code --gpus/--nodes/--gpu-memory}, or {@link LaunchShape#RECIPE}
     * @param plan whether to add the memory verdict on that hardware (or the recipe's own)
     */
    static Verdict check(Path file, List<String> overrides, LaunchShape shape, boolean plan) {
        List<Located> findings = new ArrayList<>();
        YamlNode.Mapping tree;
        try {
            tree = RecipeLoader.load(file, overrides);
        } catch (InvalidRecipe e) {
            Map<String, String> none = Map.of();
            e.errors().forEach(f -> findings.add(locate(file, f, Severity.ERROR, none)));
            e.warnings().forEach(f -> findings.add(locate(file, f, Severity.WARNING, none)));
            return new Verdict(file, false, findings, null, null);
        } catch (UserError e) {
            findings.add(locate(file, new Finding(e.where(), e.getMessage(), e.hint()), Severity.ERROR, Map.of()));
            return new Verdict(file, false, findings, null, null);
        }
        Map<String, String> keys = keysByPlace(tree);
        ValidatedRecipe validated;
        try {
            validated = ValidatedRecipe.validate(tree, file.toAbsolutePath().normalize().getParent(), shape);
        } catch (InvalidRecipe e) {
            e.errors().forEach(f -> findings.add(locate(file, f, Severity.ERROR, keys)));
            e.warnings().forEach(f -> findings.add(locate(file, f, Severity.WARNING, keys)));
            return new Verdict(file, false, findings, null, null);
        } catch (UserError e) {
            findings.add(locate(file, new Finding(e.where(), e.getMessage(), e.hint()), Severity.ERROR, keys));
            return new Verdict(file, false, findings, null, null);
        }
        validated.warnings().forEach(f -> findings.add(locate(file, f, Severity.WARNING, keys)));
        Memory memory = plan ? memory(file, validated, shape, findings, keys) : null;
        return new Verdict(file, false, findings, validated, memory);
    }

    private static Memory memory(Path file, ValidatedRecipe validated, LaunchShape shape, List<Located> findings,
            Map<String, String> keys) {
        MemoryPlan plan;
        Devices target;
        try {
            if (!shape.namesGpus() && validated.recipe().hardware() instanceof Recipe.Hardware.Unspecified) {
                findings.add(new Located(file, file.toString(), file.toString(), null, null, "hardware", Severity.WARNING,
                        "memory not checked: the recipe declares no hardware",
                        "add e.g. hardware: {gpus: 1, gpu_memory: 24GiB}, or pass --gpus and --gpu-memory"));
                return null;
            }
            plan = PlanCommand.memoryPlan(validated, file, null, null);
            target = plan.estimate().setup().hardware();
        } catch (UserError e) {
            // Planning needs the model's architecture; a model we cannot size is a gap in the check, not a bad recipe.
            Located cause = locate(file, new Finding(e.where(), e.getMessage(), e.hint()), Severity.WARNING, keys);
            findings.add(new Located(cause.recipe(), cause.where(), cause.file(), cause.line(), cause.column(), cause.key(),
                    Severity.WARNING, "memory not checked: " + cause.message(), cause.hint()));
            return null;
        }
        MemoryEstimate estimate = plan.estimate();
        Memory memory = new Memory(estimate.peakBytes(), estimate.capacityBytes(), estimate.peakPhase().label(),
                target.label(), estimate.fits());
        if (!memory.fits()) {
            String fix = plan.remedies().isEmpty() ? "no change we know of fits this device: use a larger one or a smaller model"
                    : "for example: " + plan.remedies().get(0).change() + " ('finetune plan' ranks every change that fits)";
            Located at = keyPlace(file, "hardware", keys);
            findings.add(new Located(file, at.where(), at.file(), at.line(), at.column(), "hardware", Severity.ERROR,
                    String.format(Locale.ROOT, "does not fit %s: peak %.1f GiB per device exceeds %.1f GiB by %.1f GiB",
                            target.label(), estimate.peakBytes() / GIB, estimate.capacityBytes() / GIB,
                            -estimate.headroomBytes() / GIB), fix));
        }
        return memory;
    }

    /** Where {@code key} itself was written (its first place), or the recipe file alone when it was not. */
    private static Located keyPlace(Path file, String key, Map<String, String> keys) {
        Located first = null;
        for (Map.Entry<String, String> e : keys.entrySet()) {
            Matcher m = FILE_LINE_COLUMN.matcher(e.getKey());
            if (e.getValue().equals(key) && m.matches()) {
                Located at = new Located(file, e.getKey(), m.group(1), Integer.valueOf(m.group(2)),
                        Integer.valueOf(m.group(3)), key, Severity.ERROR, "", "");
                if (first == null || at.line() < first.line() || (at.line().equals(first.line()) && at.column() < first.column())) {
                    first = at;
                }
            }
        }
        return first != null ? first : new Located(file, file.toString(), file.toString(), null, null, key, Severity.ERROR, "", "");
    }

    /**
     * Splits a finding's {@code where} into file, line and column, and names the key written there: the places of
     * every key and value of the merged tree (base files included) are known, so a line points back to its key.
     */
    static Located locate(Path recipe, Finding f, Severity severity, Map<String, String> keys) {
        String where = f.where() == null ? "" : f.where();
        Matcher m = FILE_LINE_COLUMN.matcher(where);
        if (m.matches()) {
            String named = keyNamedBy(f.message());
            return new Located(recipe, where, m.group(1), Integer.valueOf(m.group(2)), Integer.valueOf(m.group(3)),
                    named != null ? named : keys.get(where), severity, f.message(), f.hint());
        }
        Matcher override = OVERRIDE.matcher(where);
        if (override.matches()) {
            return new Located(recipe, where, recipe.toString(), null, null, override.group(1).strip(), severity,
                    f.message(), f.hint());
        }
        if (where.equals(recipe.toString()) || where.isEmpty()) {
            return new Located(recipe, where, recipe.toString(), null, null, null, severity, f.message(), f.hint());
        }
        if (KEY.matcher(where).matches()) {
            return new Located(recipe, where, recipe.toString(), null, null, where, severity, f.message(), f.hint());
        }
        // Another file (a base: or dataset file that cannot be read) or a place we cannot split: keep it whole.
        return new Located(recipe, where, where, null, null, null, severity, f.message(), f.hint());
    }

    /**
     * The key a message starts with ({@code micro_batch_size must be…}, {@code 'processor_type' is unsupported…}),
     * when the key table knows it. It wins over the place: a key the recipe lacks is reported at the top of the
     * file, where some other key is written.
     */
    private static String keyNamedBy(String message) {
        String first = message.split("[\\s,:]", 2)[0].replace("'", "");
        if (!KEY.matcher(first).matches()) {
            return null;
        }
        return RecipeKeys.get(first.replaceAll("\\[\\d+\\]", "[]")) != null ? first : null;
    }

    /** {@code file:line:col} of every key and value in the tree, to its dotted path ({@code datasets[0].path}). */
    static Map<String, String> keysByPlace(YamlNode.Mapping tree) {
        Map<String, String> keys = new HashMap<>();
        walk(tree, "", keys);
        return keys;
    }

    private static void walk(YamlNode node, String path, Map<String, String> keys) {
        if (node instanceof YamlNode.Mapping m) {
            for (YamlNode.Entry e : m.entries().values()) {
                String child = path.isEmpty() ? e.key() : path + "." + e.key();
                keys.putIfAbsent(e.keyWhere().label(), child);
                walk(e.value(), child, keys);
            }
        } else if (node instanceof YamlNode.Sequence s) {
            for (int i = 0; i < s.items().size(); i++) {
                walk(s.items().get(i), path + "[" + i + "]", keys);
                keys.putIfAbsent(s.items().get(i).where().label(), path + "[" + i + "]");
            }
            keys.putIfAbsent(s.where().label(), path);
        } else {
            keys.putIfAbsent(node.where().label(), path);
        }
    }
}
