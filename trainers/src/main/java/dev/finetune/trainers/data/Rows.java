package dev.finetune.trainers.data;

import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.hub.DatasetFiles;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import java.util.zip.GZIPInputStream;

/**
 * The rows of a dataset entry, whatever its files' format: each row as a JSON object (the form the dataset types
 * read) with the place it came from ({@code file:line} or {@code file row N}), in file order, the entry's
 * {@code shards}/{@code shards_idx} part only.
 */
public final class Rows {
    private Rows() {}

    /** Every row of the entry's files (its shard of them, when it names one) to {@code sink}. */
    public static void read(DatasetSpec spec, Consumer<JsonRows.Row> sink) {
        DatasetFiles.Resolved resolved = DatasetFiles.of(spec);
        Integer shards = spec.source().shards();
        if (shards == null) {
            for (DatasetFiles.DataFile file : resolved.files()) {
                read(file, sink);
            }
            return;
        }
        List<JsonRows.Row> all = new ArrayList<>();
        for (DatasetFiles.DataFile file : resolved.files()) {
            read(file, all::add);
        }
        // datasets' Dataset.shard(n, i, contiguous=True): n nearly equal contiguous blocks, the first ones one row
        // longer when the rows do not divide evenly
        int index = spec.source().shardsIdx();
        int div = all.size() / shards;
        int mod = all.size() % shards;
        int start = div * index + Math.min(index, mod);
        int end = start + div + (index < mod ? 1 : 0);
        all.subList(start, end).forEach(sink);
    }

    /** The rows of one file. */
    public static void read(DatasetFiles.DataFile file, Consumer<JsonRows.Row> sink) {
        // a FIFO or a device may never end, whatever its name says it holds
        dev.finetune.recipes.BoundedFiles.requireRegular(file.path(), "the dataset");
        switch (file.format()) {
            case JSON -> JsonRows.read(file.path(), sink);
            case CSV -> CsvRows.read(file.path(), sink);
            case PARQUET -> ParquetRows.read(file.path(), sink);
            case ARROW -> ArrowRows.read(file.path(), sink);
            case TEXT -> TextRows.read(file.path(), sink);
        }
    }

    /** The file's bytes, gunzipped when its name ends in {@code .gz}. */
    static InputStream open(Path file) throws IOException {
        InputStream in = Files.newInputStream(file);
        return file.getFileName().toString().endsWith(".gz") ? new GZIPInputStream(in, 1 << 16) : in;
    }

    /** A Parquet or Arrow row over {@link dev.finetune.recipes.BoundedFiles#LINE_BYTES}, as JSON Lines bounds a line. */
    static UserError rowTooLarge(Path file, long row) {
        String limit = dev.finetune.recipes.BoundedFiles.size(dev.finetune.recipes.BoundedFiles.LINE_BYTES);
        return new UserError(file + " row " + row, "row " + row + " is over " + limit + " (the limit for one row)",
                "split the data into rows under " + limit);
    }

    static UserError unreadable(Path file, String format, Exception e) {
        return new UserError(file.toString(), "cannot read the " + format + " file: " + e.getMessage(),
                "check the file is complete and really " + format + " (ds_type: sets the format when its name does not say)");
    }
}
