package dev.finetune.trainers.backend;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.FinetuneVersion;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.YamlNode;
import dev.finetune.trainers.hub.DatasetFiles;
import dev.finetune.trainers.hub.Snapshot;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Where a run's result came from, so it can be traced to the exact recipe in a repository: the recipe file and its
 * {@code base:} files byte for byte (SHA-256, and the git blob id that {@code git log --all --find-object=<id>}
 * finds), the overrides, the SHA-256 of the resolved recipe the run wrote, this build's version, and the base
 * model's identity (a local folder's content hash, or a hub id with its revision).
 *
 * @param recipeFiles the recipe first, then its {@code base:} files in the order they are first used
 * @param overrides the {@code key=value} overrides that still set a value of the resolved recipe
 */
public record Provenance(String finetuneVersion, List<FileId> recipeFiles, List<String> overrides,
        String resolvedRecipeSha256, ModelIdentity baseModel, List<DatasetSource> datasets) {

    private static final Pattern FILE_LINE_COLUMN = Pattern.compile("(.+):\\d+:\\d+");
    private static final Pattern OVERRIDE = Pattern.compile("override '(.*)'", Pattern.DOTALL);

    /** One file: as the recipe named it, its SHA-256, and its git blob id. */
    public record FileId(String file, String sha256, String gitBlob) {}

    /**
     * Where one dataset entry's rows came from: a local file or folder ({@code path}), or a hub dataset with the
     * revision the recipe names and the commit it resolved to (and the configuration and split read).
     */
    public record DatasetSource(String list, String path, String hubId, String revision, String commit, String name,
            String split) {}

    /** The model trained from: part of the run's identity (its resume keys), so other weights are another run. */
    public sealed interface ModelIdentity {
        /**
         * What {@code base_model} resolved to ({@link dev.finetune.trainers.hub.HubModels#resolve}): a local folder's
         * identity (every byte read: seconds per GB, once per run), or the hub id at the commit the run read.
         */
        static ModelIdentity of(Snapshot baseModel) {
            return baseModel.commit() == null ? folder(baseModel.folder())
                    : new Hub(baseModel.repoId(), baseModel.revision(), baseModel.commit());
        }

        /**
         * What a resume compares: the content hash, or the hub id at its commit (never the branch name: a branch
         * that moved on is other weights).
         */
        default String key() {
            if (this instanceof Folder f) {
                return "sha256:" + f.sha256();
            }
            Hub h = (Hub) this;
            return "hub:" + h.id() + "@" + h.commit();
        }

        /**
         * A local folder. {@code sha256} is that of its files' {@code sha256sum} lines ({@code <hash>  <name>}, names
         * in byte order, top-level regular files only): {@code LC_ALL=C sha256sum * | sha256sum} in the folder.
         */
        record Folder(String path, String sha256, int files, long bytes) implements ModelIdentity {}

        /**
         * A hub model: {@code revision} as the recipe names it ({@code main} when it names none), {@code commit} the
         * commit it resolved to and the run read.
         */
        record Hub(String id, String revision, String commit) implements ModelIdentity {}
    }

    public Provenance {
        recipeFiles = List.copyOf(recipeFiles);
        overrides = List.copyOf(overrides);
        datasets = List.copyOf(datasets);
    }

    /**
     * @param resolvedRecipe the text the run writes as {@code recipe.resolved.yaml}
     * @param model the base model's identity ({@link ModelIdentity#of}), computed once per run
     */
    public static Provenance of(ValidatedRecipe recipe, String resolvedRecipe, ModelIdentity model) {
        Set<Path> files = new LinkedHashSet<>();
        Set<String> overrides = new LinkedHashSet<>();
        collect(recipe.tree(), files, overrides);
        List<FileId> ids = new ArrayList<>();
        for (Path file : files) {
            ids.add(fileId(file));
        }
        List<DatasetSource> datasets = new ArrayList<>();
        addDatasets(datasets, "datasets", recipe.recipe().data().datasets());
        addDatasets(datasets, "test_datasets", recipe.recipe().data().testDatasets());
        return new Provenance(FinetuneVersion.get(), ids, List.copyOf(overrides),
                hex(sha256().digest(resolvedRecipe.getBytes(StandardCharsets.UTF_8))), model, datasets);
    }

    /** Each entry as the run reads it: the hub commit comes from the same resolution the data pipeline uses. */
    private static void addDatasets(List<DatasetSource> out, String list, List<DatasetSpec> specs) {
        for (DatasetSpec spec : specs) {
            if (spec.local()) {
                out.add(new DatasetSource(list, spec.path().toString(), null, null, null, null, null));
            } else {
                DatasetFiles.Resolved resolved = DatasetFiles.of(spec);
                Snapshot s = resolved.snapshot();
                out.add(new DatasetSource(list, null, s.repoId(), s.revision(), s.commit(), resolved.config(),
                        spec.split()));
            }
        }
    }

    /** The form written into the output folder's marker. */
    public JsonObject toJson() {
        JsonObject o = new JsonObject();
        o.addProperty("finetune_version", finetuneVersion);
        JsonArray files = new JsonArray();
        for (FileId f : recipeFiles) {
            JsonObject file = new JsonObject();
            file.addProperty("file", f.file());
            file.addProperty("sha256", f.sha256());
            file.addProperty("git_blob", f.gitBlob());
            files.add(file);
        }
        o.add("recipe_files", files);
        JsonArray given = new JsonArray();
        overrides.forEach(given::add);
        o.add("overrides", given);
        o.addProperty("resolved_recipe_sha256", resolvedRecipeSha256);
        JsonObject model = new JsonObject();
        if (baseModel instanceof ModelIdentity.Folder f) {
            model.addProperty("path", f.path());
            model.addProperty("sha256", f.sha256());
            model.addProperty("files", f.files());
            model.addProperty("bytes", f.bytes());
        } else if (baseModel instanceof ModelIdentity.Hub h) {
            model.addProperty("hub_id", h.id());
            model.addProperty("revision", h.revision());
            model.addProperty("commit", h.commit());
        }
        o.add("base_model", model);
        JsonArray data = new JsonArray();
        for (DatasetSource d : datasets) {
            JsonObject entry = new JsonObject();
            entry.addProperty("list", d.list());
            if (d.path() != null) {
                entry.addProperty("path", d.path());
            } else {
                entry.addProperty("hub_id", d.hubId());
                entry.addProperty("revision", d.revision());
                entry.addProperty("commit", d.commit());
                if (d.name() != null) {
                    entry.addProperty("name", d.name());
                }
                entry.addProperty("split", d.split());
            }
            data.add(entry);
        }
        o.add("datasets", data);
        return o;
    }

    /** The files a recipe was read from: the recipe itself, then its {@code base:} files in the order first used. */
    public static List<Path> recipeFiles(YamlNode tree) {
        Set<Path> files = new LinkedHashSet<>();
        collect(tree, files, new LinkedHashSet<>());
        return List.copyOf(files);
    }

    /** Files of every place in the tree (the recipe's own first: its root), and the overrides that set values. */
    private static void collect(YamlNode node, Set<Path> files, Set<String> overrides) {
        YamlNode.Where where = node.where();
        Matcher file = FILE_LINE_COLUMN.matcher(where.label());
        Matcher override = OVERRIDE.matcher(where.label());
        if (file.matches() && where.dir() != null
                && Files.isRegularFile(where.dir().resolve(Path.of(file.group(1)).getFileName()))) {
            files.add(where.dir().resolve(Path.of(file.group(1)).getFileName()));
        } else if (override.matches()) {
            overrides.add(override.group(1));
        }
        if (node instanceof YamlNode.Mapping m) {
            for (YamlNode.Entry e : m.entries().values()) {
                collect(e.value(), files, overrides);
            }
        } else if (node instanceof YamlNode.Sequence s) {
            for (YamlNode item : s.items()) {
                collect(item, files, overrides);
            }
        }
    }

    static FileId fileId(Path file) {
        try {
            byte[] bytes = Files.readAllBytes(file);
            MessageDigest blob = MessageDigest.getInstance("SHA-1");
            blob.update(("blob " + bytes.length + "\0").getBytes(StandardCharsets.US_ASCII));
            return new FileId(file.toString(), hex(sha256().digest(bytes)), hex(blob.digest(bytes)));
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot read the recipe file again to record it: " + e.getMessage(),
                    "check it was not moved or deleted while the run started");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Reads every byte of the model's files: seconds per GB, once per run, against hours of training. */
    static ModelIdentity.Folder folder(Path dir) {
        List<Path> files;
        try (Stream<Path> listing = Files.list(dir)) {
            files = listing.filter(Files::isRegularFile)
                    .sorted((a, b) -> compareBytes(a.getFileName().toString(), b.getFileName().toString())).toList();
        } catch (IOException e) {
            throw new UserError(dir.toString(), "cannot list the model folder: " + e.getMessage(), "check its permissions");
        }
        StringBuilder lines = new StringBuilder();
        long bytes = 0;
        byte[] buffer = new byte[1 << 16];
        for (Path file : files) {
            MessageDigest digest = sha256();
            try (InputStream in = Files.newInputStream(file)) {
                int n;
                while ((n = in.read(buffer)) > 0) {
                    digest.update(buffer, 0, n);
                    bytes += n;
                }
            } catch (IOException e) {
                throw new UserError(file.toString(), "cannot read the model file: " + e.getMessage(), "check its permissions");
            }
            lines.append(hex(digest.digest())).append("  ").append(file.getFileName()).append('\n');
        }
        String sha = hex(sha256().digest(lines.toString().getBytes(StandardCharsets.UTF_8)));
        return new ModelIdentity.Folder(dir.toAbsolutePath().normalize().toString(), sha, files.size(), bytes);
    }

    private static int compareBytes(String a, String b) {
        return java.util.Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8), b.getBytes(StandardCharsets.UTF_8));
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String hex(byte[] bytes) {
        return HexFormat.of().formatHex(bytes);
    }
}
