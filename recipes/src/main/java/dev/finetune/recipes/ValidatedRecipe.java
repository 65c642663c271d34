package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.model.ModelSource;
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * A recipe that passed validation, resolved for one launch shape, with what was derived from it and the warnings it
 * raised.
 *
 * @param run how it runs (backend, device, ranks, precision, reference, checkpointing): decided once, read everywhere
 * @param plan the batch arithmetic over {@code run}'s ranks
 * @param tree the merged tree after {@code base:} and overrides: what {@code --flatten} prints
 * @param recipeDir where relative paths in the recipe start
 */
public record ValidatedRecipe(Recipe recipe, ResolvedRun run, BatchPlan plan, List<Finding> warnings, Mapping tree,
        Path recipeDir) {

    /** Loads, merges, overrides and validates as the recipe's own {@code hardware:} says to run it. */
    public static ValidatedRecipe load(Path file, List<String> overrides) {
        return load(file, overrides, LaunchShape.RECIPE);
    }

    /** Loads, merges, overrides and validates for {@code shape}; every error at once as {@link InvalidRecipe}. */
    public static ValidatedRecipe load(Path file, List<String> overrides, LaunchShape shape) {
        Mapping tree = RecipeLoader.load(file, overrides);
        return validate(tree, file.toAbsolutePath().normalize().getParent(), shape);
    }

    public static ValidatedRecipe validate(Mapping tree, Path recipeDir) {
        return validate(tree, recipeDir, LaunchShape.RECIPE);
    }

    /** The same recipe launched as {@code shape}: the run and its batch plan resolved again, the files not reread. */
    public ValidatedRecipe launchedAs(LaunchShape shape) {
        return validate(tree, recipeDir, shape);
    }

    public static ValidatedRecipe validate(Mapping tree, Path recipeDir, LaunchShape shape) {
        Problems problems = new Problems();
        Recipe recipe = RecipeReader.read(tree, recipeDir, problems);
        ModelSource.Found architecture = architecture(recipe, recipeDir, problems);
        ResolvedRun run = ResolvedRun.resolve(recipe, shape, architecture == null ? null : architecture.config(),
                problems, tree.where());
        Long rows = countRows(recipe, problems);
        if (architecture != null && recipe.model().baseModelConfig() == null) {
            requireContext(recipe, architecture, problems, tree);
        }
        RunChecks.check(recipe, run, problems, tree.where());
        if (architecture != null) {
            RunChecks.requireConfigOverridesRead(recipe, run, architecture.json(), problems, tree.where());
            RunChecks.requireExpertLoraWithoutDropout(recipe, run, architecture.config(), problems, tree.where());
        }
        RunChecks.requireModelTemplate(recipe, recipeDir, problems);
        if (rows != null && recipe.objective() instanceof Recipe.Objective.Dpo) {
            checkPreferencePairs(recipe, problems);
        }
        if (rows != null && rows > 0 && BatchPlan.heldOut(recipe.data().valSetSize(), rows) >= rows) {
            problems.error(problems.at("val_set_size", tree.where()), "val_set_size "
                    + YamlNumbers.fmt(recipe.data().valSetSize()) + " holds out " + BatchPlan.heldOut(recipe.data()
                    .valSetSize(), rows) + " of the " + rows + " rows, leaving nothing to train on",
                    "lower val_set_size or add data");
        }
        BatchPlan plan = BatchPlan.derive(recipe, run, rows, problems, tree.where());
        if (!problems.errors.isEmpty()) {
            throw new InvalidRecipe(problems.errors, problems.warnings);
        }
        return new ValidatedRecipe(recipe, run, plan, List.copyOf(problems.warnings), tree, recipeDir);
    }

    /** The batch line and the rest of the batch plan, as {@code validate}, {@code plan} and training print them. */
    public String describe() {
        return plan.describe(run);
    }

    /**
     * What the run's start still checks because only the machine can answer it: what {@code validate} cannot know
     * (the run itself is the last line of {@link #describe}).
     */
    public String leftToTheRun() {
        return RunChecks.leftToTheRun(recipe, run, recipeDir);
    }

    /**
     * The resolved recipe as plain YAML that Axolotl reads: {@code base:} merged away, overrides applied, local
     * dataset and model paths rewritten relative to {@code targetDir} when they were written in another folder.
     * Keys are sorted at every level, so the text depends only on the recipe's meaning and can be committed and
     * diffed.
     */
    public String flatten(Path targetDir) {
        org.yaml.snakeyaml.DumperOptions options = new org.yaml.snakeyaml.DumperOptions();
        options.setDefaultFlowStyle(org.yaml.snakeyaml.DumperOptions.FlowStyle.BLOCK);
        options.setIndent(2);
        options.setIndicatorIndent(0);
        options.setWidth(120);
        return new org.yaml.snakeyaml.Yaml(options).dump(plain(tree, "", targetDir.toAbsolutePath().normalize()));
    }

    private static Object plain(YamlNode node, String path, Path targetDir) {
        if (node instanceof Mapping m) {
            java.util.Map<String, Object> out = new java.util.TreeMap<>();
            for (YamlNode.Entry e : m.entries().values()) {
                out.put(e.key(), plain(e.value(), path.isEmpty() ? e.key() : path + "." + e.key(), targetDir));
            }
            return out;
        }
        if (node instanceof YamlNode.Sequence s) {
            java.util.List<Object> out = new java.util.ArrayList<>();
            for (YamlNode item : s.items()) {
                out.add(plain(item, path + "[]", targetDir));
            }
            return out;
        }
        YamlNode.Scalar s = (YamlNode.Scalar) node;
        if ((path.equals("datasets[].path") || path.equals("test_datasets[].path") || path.equals("base_model")
                || path.equals("base_model_config") || path.equals("tokenizer_config")) && s.value() instanceof String p
                && s.where().dir() != null && !s.where().dir().equals(targetDir) && !Path.of(p).isAbsolute()) {
            Path resolved = s.where().dir().resolve(p).normalize();
            if (Files.exists(resolved)) {
                return targetDir.relativize(resolved).toString();
            }
        }
        return s.value() instanceof java.math.BigInteger b ? b.toString() : s.value();
    }

    /**
     * The architecture the recipe trains, where it is known without the network: {@code base_model_config} or
     * {@code base_model} as a local folder or a row of the built-in table (as {@code plan} reads it). An unknown
     * {@code model_type} in a config at hand is an error here, naming the supported families.
     */
    private static ModelSource.Found architecture(Recipe recipe, Path recipeDir, Problems problems) {
        String name = recipe.model().baseModelConfig() != null ? recipe.model().baseModelConfig()
                : recipe.model().baseModel();
        if (name == null || name.isBlank()) {
            return null;
        }
        try {
            // revision_of_model pins base_model's commit, not that of a separate base_model_config
            String revision = recipe.model().baseModelConfig() != null ? null : recipe.model().revision();
            return ModelSource.resolve(name, revision, recipeDir, null, recipe.model().configOverrides())
                    instanceof ModelSource.Found found ? found : null;
        } catch (UserError e) {
            problems.error(e.where(), e.getMessage(), e.hint());
            return null;
        }
    }

    /**
     * {@code sequence_len} must fit the model's context ({@code max_position_embeddings}) when the architecture
     * is known here (a local model folder or the built-in table): beyond it the positions have no trained meaning,
     * and the run would only fail later, out of memory.
     */
    private static void requireContext(Recipe recipe, ModelSource.Found found, Problems problems, Mapping tree) {
        int context = found.config().maxPositionEmbeddings();
        if (recipe.training().sequenceLen() > context) {
            problems.error(problems.at("sequence_len", tree.where()), "sequence_len "
                    + recipe.training().sequenceLen() + " is beyond the model's context of " + context
                    + " tokens (max_position_embeddings, " + found.from() + "); training past it is unsupported:"
                    + " finetune has no RoPE scaling or sequence parallelism to stretch the context",
                    "set sequence_len: " + context + " or less");
        }
    }

    /** Warns, with counts, about local preference rows that teach nothing (chosen == rejected, blank answers). */
    private static void checkPreferencePairs(Recipe recipe, Problems problems) {
        for (DatasetSpec d : recipe.data().datasets()) {
            if (!d.path().getFileName().toString().toLowerCase(java.util.Locale.ROOT).endsWith(".jsonl")) {
                continue;
            }
            PreferenceChecks checks = new PreferenceChecks();
            try (BoundedFiles.Lines lines = new BoundedFiles.Lines(d.path(), BoundedFiles.LINE_BYTES, "the dataset")) {
                for (BoundedFiles.Lines.Line line; (line = lines.next()) != null; ) {
                    if (line.text() == null || line.text().isBlank()) {
                        continue;
                    }
                    var element = com.google.gson.JsonParser.parseString(line.text());
                    if (element.isJsonObject()) {
                        var row = element.getAsJsonObject();
                        checks.add(row.get(d.fieldChosen() != null ? d.fieldChosen() : "chosen"),
                                row.get(d.fieldRejected() != null ? d.fieldRejected() : "rejected"));
                    }
                }
            } catch (IOException | RuntimeException e) {
                continue; // a broken row is the trainer's (or countRows') to report, with its line number
            }
            String warning = checks.warning();
            if (warning != null) {
                problems.warn(d.where(), warning, PreferenceChecks.HINT);
            }
        }
    }

    /** Rows of the training data when every dataset is a local JSONL/JSON file: one non-blank line or array item each. */
    private static Long countRows(Recipe recipe, Problems problems) {
        List<DatasetSpec> datasets = recipe.data().datasets();
        if (datasets.isEmpty() || datasets.stream().anyMatch(d -> !d.local() || !Files.isRegularFile(d.path()))) {
            return null;
        }
        long rows = 0;
        for (DatasetSpec d : datasets) {
            String name = d.path().getFileName().toString().toLowerCase(java.util.Locale.ROOT);
            try {
                if (name.endsWith(".jsonl")) {
                    try (BoundedFiles.Lines lines = new BoundedFiles.Lines(d.path(), BoundedFiles.LINE_BYTES,
                            "the dataset")) {
                        for (BoundedFiles.Lines.Line line; (line = lines.next()) != null; ) {
                            if (line.text() == null) {
                                problems.error(d.path() + ":" + line.number(), "this line is not valid UTF-8 text",
                                        "save the file as UTF-8 (or remove the line)");
                                return null;
                            }
                            if (!line.text().isBlank()) {
                                rows++;
                            }
                        }
                    } catch (UserError e) {
                        problems.error(e.where(), e.getMessage(), e.hint());
                        return null;
                    }
                } else if (name.endsWith(".json")) {
                    // counted as it streams by: the elements are never built, so their size costs nothing here
                    BoundedFiles.requireRegular(d.path(), "the dataset");
                    try (var reader = new com.google.gson.stream.JsonReader(Files.newBufferedReader(d.path(),
                            StandardCharsets.UTF_8))) {
                        if (reader.peek() == com.google.gson.stream.JsonToken.BEGIN_ARRAY) {
                            reader.beginArray();
                            while (reader.hasNext()) {
                                reader.skipValue();
                                rows++;
                            }
                        } else {
                            rows++;
                        }
                    }
                } else {
                    return null;
                }
            } catch (IOException | RuntimeException e) {
                problems.error(d.where(), "cannot read dataset " + d.path() + ": " + e.getMessage(),
                        "check the file is readable JSON or JSONL");
                return null;
            }
        }
        return rows;
    }
}
