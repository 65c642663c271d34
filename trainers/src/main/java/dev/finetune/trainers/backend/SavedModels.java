package dev.finetune.trainers.backend;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.io.AtomicFiles;
import dev.finetune.adapters.io.SafetensorsDtype;
import dev.finetune.adapters.io.SafetensorsReader;
import dev.finetune.adapters.io.SafetensorsWriter;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.adapters.peft.AdapterWeights;
import dev.finetune.adapters.peft.LoraMerge;
import dev.finetune.adapters.peft.PeftNames;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.RecipeLoader;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.YamlNode;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.trainers.hub.HubModels;
import dev.finetune.trainers.hub.ModelFiles;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Models as training leaves them: a Hugging Face model folder ({@code config.json} + safetensors), or an output
 * folder holding a PEFT LoRA adapter whose base is named by {@code adapter_config.json} (or, when that path no
 * longer exists, by the run's {@code recipe.resolved.yaml}).
 */
public final class SavedModels {
    private SavedModels() {}

    /** True for a folder with an adapter and no full weights of its own. */
    public static boolean isAdapter(Path dir) {
        return Files.isRegularFile(dir.resolve(AdapterConfig.FILE_NAME)) && !Files.isRegularFile(dir.resolve("config.json"));
    }

    /** The model folder whose {@code config.json} describes {@code dir}'s architecture. */
    public static Path architectureDir(Path dir) {
        requireFolder(dir);
        return isAdapter(dir) ? baseOf(dir) : dir;
    }

    public static ModelConfig config(Path dir) {
        return ModelConfig.read(architectureDir(dir));
    }

    /** Where the tokenizer of {@code dir} is: its own copy (training writes one), else the base model's. */
    public static Path tokenizerDir(Path dir) {
        return Files.isRegularFile(dir.resolve("tokenizer.json")) ? dir : architectureDir(dir);
    }

    /**
     * The base model folder of an adapter folder: {@code adapter_config.json}'s base, else the run's
     * {@code base_model} (read only when needed, so a damaged resolved recipe never hides a good adapter config).
     */
    public static Path baseOf(Path adapterDir) {
        AdapterConfig config = AdapterConfig.read(adapterDir);
        List<String> tried = new ArrayList<>();
        if (config.baseModelNameOrPath() != null) {
            Path candidate = adapterDir.resolve(config.baseModelNameOrPath());
            if (Files.isRegularFile(candidate.resolve("config.json"))) {
                return candidate.normalize();
            }
            tried.add(candidate.normalize().toString());
        }
        String recorded = recordedBaseModel(adapterDir);
        if (recorded != null) {
            Path candidate = adapterDir.resolve(recorded);
            if (Files.isRegularFile(candidate.resolve("config.json"))) {
                return candidate.normalize();
            }
            tried.add(candidate.normalize().toString());
        }
        // a hub model (what PEFT writes too): the commit the run trained on when its marker records one, through
        // the HF cache, fetched if missing and allowed
        // (both names are tried, and the answer lists every place looked at, so a wrong path in one does not hide
        // the other and the message says what to fix)
        List<String> hubAnswers = new ArrayList<>();
        for (String name : new java.util.LinkedHashSet<>(java.util.Arrays.asList(config.baseModelNameOrPath(), recorded))) {
            if (name != null && HubModels.isRepoId(name) && !Files.isDirectory(adapterDir.resolve(name))) {
                try {
                    return HubModels.folder(name, recordedCommit(adapterDir, name), ModelFiles.TRAINING,
                            adapterDir.resolve(AdapterConfig.FILE_NAME) + ": base_model_name_or_path");
                } catch (UserError e) {
                    hubAnswers.add("hub model " + name + ": " + e.getMessage());
                }
            }
        }
        throw new UserError(adapterDir.resolve(AdapterConfig.FILE_NAME).toString(),
                "the adapter's base model is not a local model folder (tried " + (tried.isEmpty() ? "nothing: no base recorded" : String.join(", ", tried)) + ")"
                        + (hubAnswers.isEmpty() ? "" : " nor found through the hub (" + String.join("; ", hubAnswers) + ")"),
                "set base_model_name_or_path in adapter_config.json to the base model's folder");
    }

    /**
     * The hub commit of {@code repoId} that the run in {@code dir} (an output folder, or one of its checkpoints)
     * recorded in its marker, or null.
     */
    private static String recordedCommit(Path dir, String repoId) {
        for (Path d : dir.getParent() == null ? List.of(dir) : List.of(dir, dir.getParent())) {
            Path marker = d.resolve(OutputFolder.MARKER);
            if (Files.isRegularFile(marker)) {
                try {
                    var base = com.google.gson.JsonParser.parseString(Files.readString(marker)).getAsJsonObject()
                            .getAsJsonObject("provenance").getAsJsonObject("base_model");
                    return base != null && base.has("commit") && repoId.equals(base.get("hub_id").getAsString())
                            ? base.get("commit").getAsString() : null;
                } catch (java.io.IOException | RuntimeException e) {
                    return null; // an unreadable marker: the revision's newest commit then
                }
            }
        }
        return null;
    }

    /** {@code base_model} of the run's {@code recipe.resolved.yaml} as YAML reads it, or null without one. */
    private static String recordedBaseModel(Path outputDir) {
        Path recipe = outputDir.resolve(RunFiles.RESOLVED_RECIPE);
        if (!Files.isRegularFile(recipe)) {
            return null;
        }
        YamlNode value = RecipeLoader.parseFile(recipe, recipe.toString()).get("base_model");
        return value instanceof YamlNode.Scalar scalar && scalar.value() instanceof String text ? text : null;
    }

    /** Loads {@code dir} for inference: a full model as it is, an adapter on top of its base. */
    public static LlamaModel load(Path dir, NDManager manager) {
        requireFolder(dir);
        if (!isAdapter(dir)) {
            return LlamaModel.load(dir, manager, LoadOptions.inference());
        }
        AdapterFiles.Saved saved = AdapterFiles.read(dir, manager);
        LoraFactory factory = new LoraFactory(coveredBy(saved), manager, 0);
        LlamaModel model = LlamaModel.load(baseOf(dir), manager, LoadOptions.adapters(factory));
        factory.requireMatches();
        AdapterWeights.load(model.trainable(), saved.tensors(), dir.resolve(AdapterFiles.WEIGHTS_FILE).toString());
        return model;
    }

    /**
     * Folds the adapter of {@code adapterDir} into its base and writes a complete Hugging Face model folder to
     * {@code out}: {@code model.safetensors} (float32), the base's {@code config.json}, the tokenizer files.
     * The folder is written under a temporary name and renamed, so {@code out} is either complete or absent.
     */
    public static void mergeLora(Path adapterDir, Path out) {
        requireFolder(adapterDir);
        if (!Files.isRegularFile(adapterDir.resolve(AdapterConfig.FILE_NAME))) {
            throw new UserError(adapterDir.toString(), "no " + AdapterConfig.FILE_NAME + " here: nothing to merge",
                    "give the output_dir of a LoRA or QLoRA run");
        }
        if (Files.exists(out, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
            // a link too, even one to nothing: the merged folder would replace it, or fail and leave a copy behind
            throw new UserError(out.toString(), Files.isSymbolicLink(out) ? "already exists (a symbolic link)"
                    : "already exists", "remove it or choose another --out");
        }
        Path base = baseOf(adapterDir);
        Path staging = null;
        try (NDManager manager = NDManager.newBaseManager()) {
            AdapterFiles.Saved adapter = AdapterFiles.read(adapterDir, manager);
            Map<String, NDArray> weights = new LinkedHashMap<>();
            try (SafetensorsReader reader = SafetensorsReader.open(base)) {
                for (String name : reader.names()) {
                    weights.put(name, reader.load(name, manager));
                }
            }
            Map<String, NDArray> merged = LoraMerge.merge(weights, adapter.config(), adapter.tensors(),
                    adapterDir.resolve(AdapterFiles.WEIGHTS_FILE).toString());
            List<NamedArray> named = new ArrayList<>();
            merged.forEach((name, array) -> named.add(new NamedArray(name, array)));
            Path parent = out.toAbsolutePath().getParent();
            Files.createDirectories(parent);
            staging = Files.createTempDirectory(parent, "." + out.getFileName() + "-");
            // a temporary folder is private (700); the merged model is for others to read, like any model folder
            try {
                Files.setPosixFilePermissions(staging, java.nio.file.attribute.PosixFilePermissions.fromString("rwxr-xr-x"));
            } catch (UnsupportedOperationException e) {
                // not a POSIX file system: it keeps that system's defaults
            }
            SafetensorsWriter.write(staging.resolve(SafetensorsReader.SINGLE_FILE), named, SafetensorsDtype.F32,
                    Map.of("format", "pt"));
            Files.copy(base.resolve("config.json"), staging.resolve("config.json"));
            RunFiles.copyTokenizer(tokenizerDir(adapterDir), staging);
            AtomicFiles.publish(staging, out);
            staging = null;
        } catch (IOException | java.io.UncheckedIOException e) {
            Throwable cause = e instanceof java.io.UncheckedIOException u && u.getCause() != null ? u.getCause() : e;
            throw new UserError(out.toString(), "cannot write the merged model: " + cause.getMessage()
                    + "; nothing was left behind", "check that the folder is writable and the disk has space", e);
        } finally {
            // a full disk or any failure: the half-written copy goes, the adapter and the base stay as they were
            if (staging != null) {
                deleteQuietly(staging);
            }
        }
    }

    /**
     * The spec that puts adapters on exactly the layers the saved tensors cover: PEFT's {@code target_modules}
     * alone would also select layers that {@code layers_to_transform} or {@code exclude_modules} left out.
     */
    static AdapterSpec.Lora coveredBy(AdapterFiles.Saved saved) {
        java.util.TreeSet<String> modules = new java.util.TreeSet<>();
        for (String name : saved.tensors().keySet()) {
            if (name.startsWith(PeftNames.PREFIX) && name.endsWith(PeftNames.LORA_A)) {
                modules.add(java.util.regex.Pattern.quote(name.substring(PeftNames.PREFIX.length(),
                        name.length() - PeftNames.LORA_A.length())));
            }
        }
        AdapterConfig config = saved.config();
        return modules.isEmpty() ? spec(config) : new AdapterSpec.Lora(config.r(), config.loraAlpha(), 0,
                List.copyOf(modules), false, config.useRslora(), null);
    }

    /** The recipe-side spec that rebuilds exactly the layers the saved adapter covers. */
    static AdapterSpec.Lora spec(AdapterConfig config) {
        List<String> targets = config.targets() instanceof AdapterConfig.Targets.Names names
                ? names.names() : List.of(((AdapterConfig.Targets.Regex) config.targets()).pattern());
        return new AdapterSpec.Lora(config.r(), config.loraAlpha(), 0, targets, false, config.useRslora(), null);
    }

    private static void requireFolder(Path dir) {
        if (!Files.isDirectory(dir)) {
            throw new UserError(dir.toString(), "model folder not found",
                    "give a folder with config.json and model.safetensors, or a training output_dir with an adapter");
        }
        if (!Files.isRegularFile(dir.resolve("config.json")) && !Files.isRegularFile(dir.resolve(AdapterConfig.FILE_NAME))) {
            Path newest = newestCheckpoint(dir);
            boolean run = Files.isRegularFile(dir.resolve(OutputFolder.MARKER)) || newest != null;
            throw run ? new UserError(dir.toString(), "this training output folder has no final weights yet (a run "
                    + "still going, or one that stopped before its end)", newest == null
                    ? "wait for its first checkpoint, then give that checkpoint-N folder"
                    : "give one of its checkpoints, e.g. " + newest)
                    : new UserError(dir.toString(), "holds neither config.json nor " + AdapterConfig.FILE_NAME
                            + ": not a model folder", "give a model folder, a training output_dir, or one of its "
                            + "checkpoint-N folders");
        }
    }

    /** The newest {@code checkpoint-N} of a run folder (either backend's) that holds a model or an adapter. */
    private static Path newestCheckpoint(Path dir) {
        try (java.util.stream.Stream<Path> children = Files.list(dir)) {
            return children.filter(c -> c.getFileName().toString().matches("checkpoint-\\d{1,18}"))
                    .filter(c -> Files.isRegularFile(c.resolve("config.json"))
                            || Files.isRegularFile(c.resolve(AdapterConfig.FILE_NAME)))
                    .max(java.util.Comparator.comparingLong(c -> Long.parseLong(c.getFileName().toString().substring(11))))
                    .orElse(null);
        } catch (IOException e) {
            return null;
        }
    }

    private static void deleteQuietly(Path folder) {
        try (java.util.stream.Stream<Path> walk = Files.walk(folder)) {
            for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        } catch (IOException | java.io.UncheckedIOException e) {
            // what cannot be deleted is a hidden folder beside --out, named after it
        }
    }
}
