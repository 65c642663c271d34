package dev.finetune.trainers.hub;

import dev.finetune.recipes.DataFormat;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

/**
 * The one place that turns a dataset entry into the files its rows come from: a local file, a local folder (laid
 * out as {@code datasets} reads one), or a hub dataset fetched into the HF cache at its {@code revision} (the files of
 * its {@code name} and {@code split}, or of {@code data_files}), with the hub's parquet conversion
 * ({@code refs/convert/parquet}) for repos that hold no data file of their own.
 */
public final class DatasetFiles {
    /** The revision under which the hub publishes its Parquet conversion of every public dataset. */
    public static final String PARQUET_CONVERSION = "refs/convert/parquet";

    /** One file and its format ({@code ds_type}, else from its name). */
    public record DataFile(Path path, DataFormat format) {}

    /**
     * @param snapshot the hub snapshot read, or {@code null} for local data
     * @param config the configuration the files belong to, or {@code null}
     */
    public record Resolved(List<DataFile> files, Snapshot snapshot, String config) {}

    /** Every file of a dataset repo: {@code finetune download ID --dataset}. */
    public static final Fetcher.Selection WHOLE_REPO = new Fetcher.Selection() {
        @Override
        public List<HubClient.RepoFile> choose(List<HubClient.RepoFile> tree, Fetcher.SmallFiles small) {
            return tree;
        }

        @Override
        public boolean complete(Path folder) {
            return Files.isDirectory(folder);
        }

        @Override
        public boolean completeWithoutListing(Path folder) {
            return false;
        }
    };

    private DatasetFiles() {}

    public static Resolved of(DatasetSpec spec) {
        return of(spec, HubEnvironment.current());
    }

    public static Resolved of(DatasetSpec spec, HubEnvironment env) {
        if (spec.local()) {
            return local(spec);
        }
        return hub(spec, env);
    }

    /** Fetches every hub dataset of the recipe (training and test) into the cache; the snapshots read. */
    public static List<Snapshot> fetch(Recipe recipe, HubEnvironment env) {
        List<Snapshot> out = new ArrayList<>();
        for (DatasetSpec spec : concat(recipe.data().datasets(), recipe.data().testDatasets())) {
            if (!spec.local()) {
                out.add(of(spec, env).snapshot());
            }
        }
        return out;
    }

    private static List<DatasetSpec> concat(List<DatasetSpec> a, List<DatasetSpec> b) {
        List<DatasetSpec> all = new ArrayList<>(a);
        all.addAll(b);
        return all;
    }

    private static Resolved local(DatasetSpec spec) {
        Path path = spec.path();
        if (Files.isRegularFile(path)) {
            if (spec.split() != null && !spec.split().equals("train")) {
                throw new UserError(spec.where(), "split: " + spec.split() + " does not exist in a local file, whose "
                        + "rows all form the train split", "remove split:, or point path: at the file holding those rows");
            }
            return new Resolved(List.of(new DataFile(path, format(spec, path))), null, null);
        }
        if (!Files.isDirectory(path)) {
            throw new UserError(spec.where(), "dataset file not found: " + path,
                    "paths are relative to the recipe's directory");
        }
        List<String> paths = walk(path);
        DataLayout.Chosen chosen = DataLayout.choose(paths, readme(path), spec, "folder " + path);
        if (chosen.files().isEmpty()) {
            throw new UserError(spec.where(), "dataset folder " + path + " holds no data file (.jsonl, .json, .csv, "
                    + ".tsv, .parquet, .arrow, .txt)", "point path at a data file, or put the data files in that folder");
        }
        return new Resolved(files(spec, path, chosen.files()), null, chosen.config());
    }

    private static Resolved hub(DatasetSpec spec, HubEnvironment env) {
        String id = spec.remote();
        if (!HubModels.isRepoId(id)) {
            throw new UserError(spec.where(), "'" + id + "' is neither a local file or folder nor a hub dataset id",
                    "write a local path (./data.jsonl, relative to the recipe) or a hub id such as tatsu-lab/alpaca");
        }
        Fetcher fetcher = new Fetcher(env);
        String revision = spec.source().revisionOrMain();
        DataSelection own = new DataSelection(spec, "hub dataset " + id, false);
        Snapshot snapshot;
        try {
            snapshot = fetcher.pinned(RepoType.DATASET, id, revision, own, spec.where());
        } catch (NoDataFiles none) {
            snapshot = conversion(fetcher, spec, id);
        } catch (UserError notCached) {
            if (!env.offline() || !spec.source().dataFiles().isEmpty()) {
                throw notCached;
            }
            try {
                snapshot = conversion(fetcher, spec, id);
            } catch (UserError alsoNot) {
                throw notCached;
            }
        }
        boolean converted = PARQUET_CONVERSION.equals(snapshot.revision()) && !PARQUET_CONVERSION.equals(revision);
        DataSelection selection = converted ? new DataSelection(spec, "the parquet conversion of " + id, true) : own;
        List<String> files = selection.chosen(snapshot.folder()).files();
        return new Resolved(files(spec, snapshot.folder(), files), snapshot, selection.config(snapshot.folder()));
    }

    private static Snapshot conversion(Fetcher fetcher, DatasetSpec spec, String id) {
        if (spec.source().revision() != null && !spec.source().revision().equals(PARQUET_CONVERSION)) {
            throw new UserError(spec.where(), "hub dataset " + id + "@" + spec.source().revision()
                    + " holds no data file that finetune reads (only a loading script?)", "the hub converts public "
                    + "datasets to Parquet at the latest revision only: remove revision:, or set data_files:");
        }
        try {
            return fetcher.pinned(RepoType.DATASET, id, PARQUET_CONVERSION,
                    new DataSelection(spec, "the parquet conversion of " + id, true), spec.where());
        } catch (NoDataFiles none) {
            throw new UserError(spec.where(), "hub dataset " + id + " holds no data file that finetune reads, and its "
                    + "parquet conversion has none for " + (spec.source().name() == null ? "" : "name " + spec.source().name()
                    + ", ") + "split " + spec.split(), "check name: and split:, or set data_files:");
        } catch (UserError e) {
            if (e.getMessage().contains("revision '" + PARQUET_CONVERSION + "' does not exist")) {
                throw new UserError(spec.where(), "hub dataset " + id + " holds no data file that finetune reads "
                        + "(only a loading script?) and the hub has no parquet conversion of it", "convert it with "
                        + "datasets (load_dataset(...).to_parquet('data.parquet')) and point path at the file");
            }
            throw e;
        }
    }

    private static List<DataFile> files(DatasetSpec spec, Path root, List<String> relative) {
        List<DataFile> out = new ArrayList<>();
        for (String r : relative) {
            Path p = root.resolve(r);
            out.add(new DataFile(p, format(spec, p)));
        }
        return out;
    }

    private static DataFormat format(DatasetSpec spec, Path file) {
        if (spec.source().format() != null) {
            return spec.source().format();
        }
        DataFormat f = DataFormat.ofFile(file.getFileName().toString());
        if (f == null) {
            throw new UserError(spec.where(), "cannot tell the format of " + file + " from its name",
                    "set ds_type: json, csv, parquet, arrow or text");
        }
        return f;
    }

    /** Every regular file under {@code root} (following the cache's symlinks), relative, {@code /}-separated. */
    static List<String> walk(Path root) {
        try (Stream<Path> files = Files.walk(root, 16, java.nio.file.FileVisitOption.FOLLOW_LINKS)) {
            return files.filter(Files::isRegularFile).map(p -> root.relativize(p).toString().replace('\\', '/'))
                    .sorted().toList();
        } catch (IOException | UncheckedIOException e) {
            throw new UserError(root.toString(), "cannot list the dataset folder: " + e.getMessage(), "check its permissions");
        }
    }

    static String readme(Path folder) {
        Path readme = folder.resolve("README.md");
        try {
            return Files.isRegularFile(readme) ? Files.readString(readme, StandardCharsets.UTF_8) : null;
        } catch (IOException e) {
            return null;
        }
    }

    /** The repo holds no data file we read at this revision: the parquet conversion may have the rows. */
    static final class NoDataFiles extends RuntimeException {
        private static final long serialVersionUID = 1L;

        NoDataFiles() {
            super(null, null, false, false);
        }
    }

    /** The files of one dataset entry within a repo listing, by {@link DataLayout} (or the conversion's layout). */
    static final class DataSelection implements Fetcher.Selection {
        private final DatasetSpec spec;
        private final String label;
        private final boolean conversion;

        DataSelection(DatasetSpec spec, String label, boolean conversion) {
            this.spec = spec;
            this.label = label;
            this.conversion = conversion;
        }

        @Override
        public List<HubClient.RepoFile> choose(List<HubClient.RepoFile> tree, Fetcher.SmallFiles small) {
            List<String> paths = tree.stream().map(HubClient.RepoFile::path).toList();
            HubClient.RepoFile readme = tree.stream().filter(f -> f.path().equals("README.md")).findFirst().orElse(null);
            String text = null;
            if (readme != null && !conversion) {
                try {
                    text = Files.readString(small.fetch(readme), StandardCharsets.UTF_8);
                } catch (IOException e) {
                    text = null;
                }
            }
            DataLayout.Chosen chosen = conversion ? conversionLayout(paths) : DataLayout.choose(paths, text, spec, label);
            if (chosen.files().isEmpty()) {
                throw new NoDataFiles();
            }
            List<HubClient.RepoFile> out = new ArrayList<>();
            if (readme != null && !conversion) {
                out.add(readme);
            }
            for (HubClient.RepoFile f : tree) {
                if (chosen.files().contains(f.path())) {
                    out.add(f);
                }
            }
            return out;
        }

        @Override
        public boolean complete(Path folder) {
            try {
                List<String> files = chosen(folder).files();
                return !files.isEmpty() && files.stream().allMatch(f -> Files.isRegularFile(folder.resolve(f)));
            } catch (UserError | NoDataFiles e) {
                return false;
            }
        }

        /** A cached snapshot may lack files of the split that no run asked for yet: only a listing can tell. */
        @Override
        public boolean completeWithoutListing(Path folder) {
            return false;
        }

        DataLayout.Chosen chosen(Path folder) {
            if (!Files.isDirectory(folder)) {
                return new DataLayout.Chosen(List.of(), null);
            }
            List<String> paths = walk(folder);
            return conversion ? conversionLayout(paths) : DataLayout.choose(paths, readme(folder), spec, label);
        }

        String config(Path folder) {
            return chosen(folder).config();
        }

        /**
         * The hub's conversion: {@code <config>/<split>/NNNN.parquet} (or {@code partial-<split>} for the first
         * rows of a very large split).
         */
        private DataLayout.Chosen conversionLayout(List<String> paths) {
            List<String> configs = paths.stream().filter(p -> p.contains("/")).map(p -> p.substring(0, p.indexOf('/')))
                    .distinct().toList();
            String name = spec.source().name() != null ? spec.source().name()
                    : configs.contains("default") ? "default" : configs.size() == 1 ? configs.get(0) : null;
            if (name == null) {
                throw new UserError(spec.where(), label + " has the configurations " + String.join(", ", configs),
                        "set name: to one of them");
            }
            String split = spec.split() == null ? "train" : spec.split();
            List<String> files = DataLayout.matching(paths, List.of(name + "/" + split + "/*.parquet",
                    name + "/partial-" + split + "/*.parquet"));
            return new DataLayout.Chosen(files, name);
        }
    }
}
