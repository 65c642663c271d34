package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Sequence;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The datasets and what is done with their rows: {@code datasets}, {@code test_datasets}, {@code val_set_size},
 * {@code train_on_inputs}, {@code excess_length_strategy}.
 */
final class DataSection {
    private final Problems problems;
    private final Path recipeDir;

    DataSection(Problems problems, Path recipeDir) {
        this.problems = problems;
        this.recipeDir = recipeDir;
    }

    Recipe.Data data(KeyReader top, Recipe.Objective objective) {
        List<DatasetSpec> datasets = datasets(top, "datasets", objective);
        List<DatasetSpec> tests = datasets(top, "test_datasets", objective);
        if (datasets == null && !top.has("datasets") && !top.has("pretraining_dataset") && !problems.pluginRefused) {
            problems.error(top.where(), "datasets is required", "add e.g. 'datasets: [{path: data/train.jsonl, type: alpaca}]'");
        }
        // Axolotl's meaning: a share of the rows below 1, else a number of rows
        double valSetSize = top.number("val_set_size", 0, Double.MAX_VALUE);
        if (valSetSize >= 1 && valSetSize != Math.rint(valSetSize)) {
            problems.error(top.at("val_set_size"), "val_set_size " + YamlNumbers.fmt(valSetSize) + " is neither a "
                    + "fraction below 1 nor a whole number of rows", "use e.g. 0.05 (5 % of the rows) or 200 (rows)");
            valSetSize = 0;
        }
        if (valSetSize > 0 && tests != null && !tests.isEmpty()) {
            problems.error(top.at("val_set_size"), "val_set_size and test_datasets both define evaluation data",
                    "set val_set_size: 0 or remove test_datasets");
        }
        String prepared = top.string("dataset_prepared_path", null);
        boolean trainOnInputs = top.bool("train_on_inputs");
        Recipe.ExcessLength excess = top.choice("excess_length_strategy", Recipe.ExcessLength.class);
        boolean skipInvalidRows = top.bool("dataset_skip_invalid_rows");
        return new Recipe.Data(datasets == null ? List.of() : datasets, tests == null ? List.of() : tests, valSetSize,
                prepared, trainOnInputs, excess, skipInvalidRows, selection(top));
    }

    private DataSelection selection(KeyReader top) {
        int minSampleLen = top.integer("min_sample_len", 1);
        Integer shards = top.integer("dataset_shard_num", null, 1);
        Integer index = top.integer("dataset_shard_idx", null, 0);
        if (shards != null && index == null && !top.refused("dataset_shard_idx")) {
            problems.error(top.at("dataset_shard_num"), "dataset_shard_num needs dataset_shard_idx (which shard to train on)",
                    "add e.g. dataset_shard_idx: 0");
        } else if (index != null && shards == null && !top.refused("dataset_shard_num")) {
            problems.error(top.at("dataset_shard_idx"), "dataset_shard_idx needs dataset_shard_num (how many shards)",
                    "add e.g. dataset_shard_num: " + (index + 1));
        } else if (shards != null && index >= shards) {
            problems.error(top.at("dataset_shard_idx"), "dataset_shard_idx " + index + " is not a shard of "
                    + shards + " (they are numbered 0 to " + (shards - 1) + ")", "use 0 to " + (shards - 1));
        }
        boolean dedup = top.bool("dataset_exact_deduplication");
        boolean shuffleFirst = top.bool("shuffle_before_merging_datasets");
        boolean curriculum = top.bool("curriculum_sampling");
        // curriculum sampling keeps the data's own order, so the merged rows are shuffled only when the recipe says so
        Boolean shuffleMerged = top.bool("shuffle_merged_datasets", curriculum ? null : true);
        if (curriculum && Boolean.TRUE.equals(shuffleMerged)) {
            problems.warn(top.at("shuffle_merged_datasets"), "shuffle_merged_datasets: true shuffles the rows that "
                    + "curriculum_sampling then visits in order", "set shuffle_merged_datasets: false to keep the data's order");
        }
        if (curriculum && shuffleFirst) {
            problems.warn(top.at("shuffle_before_merging_datasets"), "shuffle_before_merging_datasets shuffles each dataset's "
                    + "rows that curriculum_sampling then visits in order", "remove it to keep each dataset's order");
        }
        boolean valid = shards != null && index != null && index < shards;
        return new DataSelection(minSampleLen, valid ? shards : 0, valid ? index : 0, dedup, shuffleFirst,
                shuffleMerged != null && shuffleMerged, curriculum, top.bool("sample_packing_sequentially"));
    }

    List<DatasetSpec> datasets(KeyReader top, String key, Recipe.Objective objective) {
        YamlNode n = top.node(key);
        if (n == null) {
            return null;
        }
        List<YamlNode> items;
        if (n instanceof Sequence seq) {
            items = seq.items();
        } else if (n instanceof Mapping) {
            items = List.of(n);
        } else {
            problems.error(n.where(), key + " must be a list of datasets, got " + YamlNode.describe(n),
                    "write '" + key + ":' then '  - path: data/train.jsonl' and '    type: alpaca'");
            return null;
        }
        if (items.isEmpty()) {
            problems.error(n.where(), key + " is an empty list", "add at least one '- path: ...' entry");
        }
        List<DatasetSpec> out = new ArrayList<>();
        for (YamlNode item : items) {
            if (!(item instanceof Mapping m)) {
                problems.error(item.where(), "each entry of " + key + " must be a mapping with path and type, got "
                        + YamlNode.describe(item), "write '- path: data/train.jsonl' and '  type: alpaca'");
                continue;
            }
            DatasetSpec spec = dataset(m, key, objective);
            if (spec != null) {
                out.add(spec);
            }
        }
        return out;
    }

    private DatasetSpec dataset(Mapping m, String listKey, Recipe.Objective objective) {
        KeyReader r = new KeyReader(m, "datasets[].", problems);
        String path = r.string("path", null);
        YamlNode typeNode = r.node("type");
        String split = r.string("split");
        String name = r.string("name", null);
        List<String> dataFiles = r.strings("data_files", true);
        DataFormat format = r.choice("ds_type", null, DataFormat.class);
        String field = r.string("field");
        String fieldMessages = r.string("field_messages", null);
        Map<String, String> mappings = new LinkedHashMap<>();
        Mapping pm = r.mapping("message_property_mappings");
        if (pm != null) {
            for (var e : pm.entries().values()) {
                if (e.value() instanceof Scalar s && s.value() instanceof String v) {
                    mappings.put(e.key(), v);
                } else {
                    problems.error(e.value().where(), "message_property_mappings." + e.key() + " must name a field",
                            "write e.g. 'role: from'");
                }
            }
        }
        String oldRole = r.string("message_field_role", null);
        String oldContent = r.string("message_field_content", null);
        if (oldRole != null) {
            problems.warn(r.at("message_field_role"), "message_field_role is an old name", "use message_property_mappings: {role: " + oldRole + "}");
            mappings.putIfAbsent("role", oldRole);
        }
        if (oldContent != null) {
            problems.warn(r.at("message_field_content"), "message_field_content is an old name", "use message_property_mappings: {content: " + oldContent + "}");
            mappings.putIfAbsent("content", oldContent);
        }
        Map<String, String> roles = roles(r);
        List<String> rolesToTrain = r.strings("roles_to_train", false);
        if (rolesToTrain == null) {
            rolesToTrain = r.defaultStrings("roles_to_train");
        }
        TrainOnEos trainOnEos = r.choice("train_on_eos", TrainOnEos.class);
        TrainOnEos trainOnEot = r.choice("train_on_eot", null, TrainOnEos.class);
        String chatTemplateJinja = r.string("chat_template_jinja", null);
        // Axolotl's rule for the recipe-wide pair, per dataset: a template text of its own means chat_template: jinja
        String chatTemplate = r.string("chat_template", chatTemplateJinja != null ? ChatTemplateNames.JINJA : null);
        ChatTemplateNames.refuseUnshipped(chatTemplate, r.at("chat_template"), problems);
        boolean dropSystemMessage = r.bool("drop_system_message");
        String fieldChosen = r.string("field_chosen", null);
        String fieldRejected = r.string("field_rejected", null);
        String revision = r.string("revision", null);
        if (Boolean.TRUE.equals(r.bool("trust_remote_code"))) {
            problems.error(r.at("trust_remote_code"), "datasets[].trust_remote_code is unsupported: dataset loading scripts are not run",
                    "use a dataset stored as JSONL, JSON or Parquet");
        }
        Integer shards = r.integer("shards", null, 1);
        Integer shardsIdx = r.integer("shards_idx", null, 0);
        if (shardsIdx != null && (shards == null || shardsIdx >= shards)) {
            problems.error(r.at("shards_idx"), "shards_idx " + shardsIdx + (shards == null ? " without shards"
                    : " is not one of the " + shards + " shards (0 to " + (shards - 1) + ")"),
                    shards == null ? "add shards: N (the number of parts), or remove shards_idx" : "use 0 to " + (shards - 1));
            shardsIdx = null;
        }
        String fieldSystem = r.string("field_system");
        String fieldTools = r.string("field_tools");
        String fieldThinking = r.string("field_thinking");
        String templateThinkingKey = r.string("template_thinking_key");
        boolean splitThinking = r.bool("split_thinking");
        String messageFieldTraining = r.string("message_field_training", null);
        String messageFieldTrainingDetail = r.string("message_field_training_detail", null);
        r.finish();
        if (path == null) {
            problems.error(m.where(), "this " + listKey + " entry has no path", "add 'path: data/train.jsonl' (or a hub dataset id)");
            return null;
        }
        DatasetType type = objective == null ? DatasetType.named(typeText(typeNode)) : datasetType(typeNode, objective, r);
        Path local = null;
        String remote = null;
        Path dir = m.where().dir() != null ? m.where().dir() : recipeDir;
        Path candidate = resolve(dir, path);
        if (candidate != null && Files.exists(candidate) && !Files.isRegularFile(candidate)
                && !Files.isDirectory(candidate)) {
            // a FIFO, /dev/urandom: neither a dataset nor a hub id, and reading it may never end
            problems.error(r.at("path"), "dataset '" + path + "' is not a regular file (a device or a pipe), so it "
                    + "cannot be read to its end", "point path at a JSON Lines file or a folder of them");
        } else if (candidate != null && Files.exists(candidate)) {
            local = candidate;
            if (!split.equals("train") && !Files.isDirectory(candidate)) {
                problems.error(r.at("split"), "split: " + split + " does not exist in a local file, whose rows all "
                        + "form the train split", "remove split:, or point path: at the file holding those rows");
            }
            if (Files.isDirectory(candidate) && !holdsData(candidate)) {
                problems.error(r.at("path"), "dataset folder '" + path + "' holds no data file (.jsonl, .json, .csv, "
                        + ".tsv, .parquet, .arrow, .txt)", "point path at a data file, or put the data files in that folder");
            }
            if (revision != null) {
                problems.error(r.at("revision"), "revision applies to hub datasets; '" + path + "' is a local "
                        + (Files.isDirectory(candidate) ? "folder" : "file"), "remove revision:");
            }
        } else if (looksLocal(path)) {
            problems.error(r.at("path"), "dataset file '" + path + "' does not exist (looked at " + candidate + ")",
                    "dataset paths are relative to the recipe file; fix the path or use a hub dataset id");
        } else {
            remote = path;
        }
        // In the recipe's order, not Map.copyOf's: that order changes from one JVM to the next, and the spec's text is part
        // of the fsdp preprocess cache key, which must not change between runs of the same recipe.
        if (type != null) {
            noEffectOn(type, objective, m);
        }
        ChatOptions chat = new ChatOptions(roles, trainOnEot, chatTemplateJinja, dropSystemMessage, fieldSystem,
                fieldTools, fieldThinking, templateThinkingKey, splitThinking, messageFieldTraining,
                messageFieldTrainingDetail);
        return new DatasetSpec(local, type, field, fieldMessages, Collections.unmodifiableMap(mappings),
                rolesToTrain, trainOnEos, chatTemplate,
                m.where().label(), remote, split, fieldChosen, fieldRejected, chat, new DatasetSource(name,
                dataFiles == null ? List.of() : dataFiles, format, revision, shards, shardsIdx == null ? 0 : shardsIdx));
    }

    /**
     * {@code roles: {assistant: [gpt, model], user: human}} (target → the dataset's names) as dataset name → target,
     * in the recipe's order; a name listed under two targets is an error.
     */
    private Map<String, String> roles(KeyReader r) {
        Mapping written = r.mapping("roles");
        Map<String, String> roles = new LinkedHashMap<>();
        if (written == null) {
            return Map.of();
        }
        for (var e : written.entries().values()) {
            List<YamlNode> sources = e.value() instanceof Sequence seq ? seq.items() : List.of(e.value());
            for (YamlNode source : sources) {
                if (!(source instanceof Scalar s) || !(s.value() instanceof String name)) {
                    problems.error(source.where(), "roles." + e.key() + " must list the dataset's role names, got "
                            + YamlNode.describe(source), "write e.g. 'roles: {assistant: [gpt, model], user: [human]}'");
                    continue;
                }
                String before = roles.put(name, e.key());
                if (before != null && !before.equals(e.key())) {
                    problems.error(source.where(), "role '" + name + "' is mapped to both " + before + " and " + e.key(),
                            "list each dataset role under one template role");
                }
            }
        }
        return Collections.unmodifiableMap(roles);
    }

    /** Keys that shape conversation turns and their labels, which only supervised {@code chat_template} rows read. */
    private static final List<String> SFT_CHAT_KEYS = List.of("roles_to_train", "train_on_eos", "train_on_eot",
            "field_system", "field_tools", "field_thinking", "template_thinking_key", "split_thinking",
            "message_field_training", "message_field_training_detail");
    /** Keys every conversation type reads (SFT chat_template, DPO chat_template.default, GRPO chat_template prompts). */
    private static final List<String> CONVERSATION_KEYS = List.of("roles", "message_property_mappings",
            "message_field_role", "message_field_content", "field_messages", "drop_system_message");

    /**
     * A key that the dataset's type never reads changes nothing: said, so that nobody believes it took effect (Axolotl
     * drops such keys silently).
     */
    private void noEffectOn(DatasetType type, Recipe.Objective objective, Mapping m) {
        boolean sftChat = type == DatasetType.CHAT_TEMPLATE && !(objective instanceof Recipe.Objective.Grpo);
        boolean conversation = sftChat || type == DatasetType.CHAT_TEMPLATE_DEFAULT;
        for (var e : m.entries().values()) {
            String key = e.key();
            boolean reads = SFT_CHAT_KEYS.contains(key) ? sftChat : CONVERSATION_KEYS.contains(key) ? conversation : true;
            if (!reads && LeftoverKeys.enabled(e.value())) {
                problems.warn(e.keyWhere(), "datasets[]." + key + " has no effect on type " + type.key(),
                        "remove it, or use type: chat_template, whose conversation rows it shapes");
            }
        }
    }

    /** A folder is read as datasets.load_dataset reads one: the data files in it and its subfolders. */
    private static boolean holdsData(Path folder) {
        try (java.util.stream.Stream<Path> files = Files.walk(folder, 4)) {
            return files.anyMatch(p -> Files.isRegularFile(p) && DataFormat.ofFile(p.getFileName().toString()) != null);
        } catch (java.io.IOException | java.io.UncheckedIOException e) {
            return false;
        }
    }

    private static Path resolve(Path dir, String path) {
        try {
            String p = path.startsWith("~/") ? System.getProperty("user.home") + path.substring(1) : path;
            return dir.resolve(p).normalize();
        } catch (java.nio.file.InvalidPathException e) {
            return null;
        }
    }

    /** Hub ids look like {@code org/name}; files have an extension or an explicit relative/absolute prefix. */
    static boolean looksLocal(String path) {
        if (path.matches("^[a-zA-Z][a-zA-Z0-9+.-]*://.*")) {
            return false;
        }
        String lower = path.toLowerCase(Locale.ROOT);
        return path.startsWith("/") || path.startsWith("./") || path.startsWith("../") || path.startsWith("~/")
                || lower.endsWith(".jsonl") || lower.endsWith(".json") || lower.endsWith(".csv")
                || lower.endsWith(".parquet") || lower.endsWith(".arrow") || lower.endsWith(".txt")
                || lower.endsWith(".jsonl.gz") || lower.endsWith(".json.gz");
    }

    private static String typeText(YamlNode typeNode) {
        return typeNode instanceof Scalar s && s.value() instanceof String t ? t : null;
    }

    private DatasetType datasetType(YamlNode typeNode, Recipe.Objective objective, KeyReader r) {
        if (typeNode == null) {
            // Axolotl's pre-tokenized rows: input_ids (and labels) as written, which supervised training reads
            if (!(objective instanceof Recipe.Objective.Sft)) {
                problems.error(r.where(), "this dataset has no type: rl: " + objective.key() + " rows need one",
                        "add e.g. 'type: " + DatasetType.keysReadBy(objective.key()).get(0) + "'");
            }
            return null;
        }
        if (typeNode instanceof Mapping) {
            problems.error(typeNode.where(), "a user-defined prompt format (type: {...}) is unsupported",
                    "convert the data to alpaca fields (instruction, input, output) and use type: alpaca");
            return null;
        }
        if (!(typeNode instanceof Scalar s) || !(s.value() instanceof String type)) {
            problems.error(typeNode.where(), "datasets[].type must be a name, got " + YamlNode.describe(typeNode),
                    "write e.g. type: alpaca");
            return null;
        }
        DatasetTypes.Verdict v = DatasetTypes.check(type, objective);
        switch (v.kind()) {
            case SUPPORTED -> {
                return v.type();
            }
            case UNSUPPORTED -> problems.error(s.where(), "dataset type '" + type + "' is unsupported: " + v.detail(), v.hint());
            case UNKNOWN -> problems.error(s.where(), "unknown dataset type '" + type + "'" + v.detail(), v.hint());
        }
        return null;
    }

}
