package dev.finetune.recipes;

import java.util.List;

/**
 * Where a dataset's rows come from beyond {@code path} and {@code split}: Axolotl's source keys, with the meanings
 * {@code datasets.load_dataset} gives them.
 *
 * @param name {@code name}: the hub dataset's configuration (its README {@code configs:} entry, or the parquet
 *     conversion's folder), or {@code null} for the default one
 * @param dataFiles {@code data_files}: files (or glob patterns) inside the hub repo or local folder to read instead
 *     of the repo's own split layout; empty when not given
 * @param format {@code ds_type}, or {@code null} to take each file's format from its name
 * @param revision {@code revision}: branch, tag or commit of a hub dataset, or {@code null} for {@code main}
 * @param shards {@code shards}: split the rows into this many contiguous parts and read one; {@code null} for all
 * @param shardsIdx {@code shards_idx}: the part read (0-based)
 */
public record DatasetSource(String name, List<String> dataFiles, DataFormat format, String revision, Integer shards,
        int shardsIdx) {

    /** A dataset that names none of these keys. */
    public static final DatasetSource DEFAULT = new DatasetSource(null, List.of(), null, null, null, 0);

    public DatasetSource {
        dataFiles = List.copyOf(dataFiles);
    }

    /** The hub revision, {@code main} when none is given. */
    public String revisionOrMain() {
        return revision == null ? "main" : revision;
    }
}
