package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import dev.finetune.recipes.BoundedFiles;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.util.function.Consumer;
import org.apache.parquet.ParquetReadOptions;
import org.apache.parquet.column.page.PageReadStore;
import org.apache.parquet.conf.PlainParquetConfiguration;
import org.apache.parquet.format.PageHeader;
import org.apache.parquet.format.Util;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.io.ColumnIOFactory;
import org.apache.parquet.io.LocalInputFile;
import org.apache.parquet.io.MessageColumnIO;
import org.apache.parquet.io.RecordReader;
import org.apache.parquet.schema.MessageType;

/**
 * {@code ds_type: parquet}: each record as the JSON object {@code datasets} would give for it: strings, numbers,
 * booleans, lists (Parquet's LIST, also the legacy two-level forms), maps (MAP, keys as text), structs as objects,
 * nulls as null, raw bytes as base64. Read with parquet-java straight from the local file, row group by row group.
 */
final class ParquetRows {
    private ParquetRows() {}

    /** An uncompressed page holds at most a page's worth of values plus one value: pyarrow, Spark and parquet-java
     * write 1 MiB pages, so a page over four rows' bound is a lie (or a file no reader of ours should trust). */
    static final long PAGE_BYTES = 4L * BoundedFiles.LINE_BYTES;

    static void read(Path file, Consumer<JsonRows.Row> sink) {
        long fileLength = footerBound(file);
        ParquetReadOptions options = ParquetReadOptions.builder(new PlainParquetConfiguration()).build();
        long row = 0;
        try (ParquetFileReader reader = new ParquetFileReader(new LocalInputFile(file), options)) {
            checkChunks(file, reader.getFooter(), fileLength);
            MessageType schema = reader.getFooter().getFileMetaData().getSchema();
            MessageColumnIO io = new ColumnIOFactory().getColumnIO(schema);
            ParquetJson.Materializer materializer = new ParquetJson.Materializer(schema);
            PageReadStore pages;
            while ((pages = reader.readNextRowGroup()) != null) {
                RecordReader<JsonObject> records = io.getRecordReader(pages, materializer);
                for (long i = 0; i < pages.getRowCount(); i++) {
                    JsonObject value = records.read();
                    sink.accept(new JsonRows.Row(value, file + " row " + row, null));
                    row++;
                }
            }
        } catch (ParquetJson.RowTooLarge e) {
            throw Rows.rowTooLarge(file, row);
        } catch (StackOverflowError e) {
            // a schema nested deeper than any dataset's: parquet-java builds it recursively
            throw new UserError(file.toString(), "the Parquet schema nests too deep to be a dataset's",
                    "check the file is really a dataset (ds_type: sets the format when its name does not say)");
        } catch (IOException | RuntimeException e) {
            if (e instanceof UserError u) {
                throw u;
            }
            for (Throwable t = e.getCause(); t != null; t = t.getCause()) {
                if (t instanceof ParquetJson.RowTooLarge) {
                    throw Rows.rowTooLarge(file, row);
                }
            }
            throw Rows.unreadable(file, "Parquet", e);
        }
    }

    /**
     * The file's length, once its footer's length (the 4 bytes before the closing {@code PAR1}) is known to fit in
     * the file and under {@link BoundedFiles#METADATA_BYTES}: parquet-java allocates what the footer claims.
     */
    private static long footerBound(Path file) {
        try (FileChannel channel = FileChannel.open(file)) {
            long length = channel.size();
            if (length < 12) {
                return length; // parquet-java says "not a Parquet file"
            }
            ByteBuffer tail = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            while (tail.hasRemaining() && channel.read(tail, length - 8 + tail.position()) > 0) {
                // positional reads until the 8 bytes are in
            }
            long footer = Integer.toUnsignedLong(tail.getInt(0));
            if (tail.get(4) == 'P' && tail.get(5) == 'A' && tail.get(6) == 'R' && tail.get(7) == '1'
                    && (footer > length - 12 || footer > BoundedFiles.METADATA_BYTES)) {
                throw new UserError(file.toString(), "the Parquet footer claims " + footer + " bytes, "
                        + (footer > length - 12 ? "more than the file's " + length : "over "
                                + BoundedFiles.size(BoundedFiles.METADATA_BYTES)) + " (a damaged or truncated file?)",
                        "download or write the file again");
            }
            return length;
        } catch (IOException e) {
            throw Rows.unreadable(file, "Parquet", e);
        }
    }

    /**
     * What the footer says of each column chunk (where it lies, how long it is) and what each page header says of its
     * page must fit in the file and under {@link #PAGE_BYTES}, before parquet-java allocates buffers of those
     * sizes: a file that lies is one line, not an {@code OutOfMemoryError}. Reads only the page headers.
     */
    private static void checkChunks(Path file, ParquetMetadata footer, long fileLength) throws IOException {
        try (FileChannel channel = FileChannel.open(file)) {
            for (int g = 0; g < footer.getBlocks().size(); g++) {
                BlockMetaData group = footer.getBlocks().get(g);
                for (ColumnChunkMetaData chunk : group.getColumns()) {
                    long start = chunk.getStartingPos();
                    long size = chunk.getTotalSize();
                    String where = "column '" + chunk.getPath().toDotString() + "' of row group " + g;
                    if (start < 4 || size < 0 || start + size > fileLength - 8) {
                        throw lie(file, where + " claims bytes " + start + " to " + (start + size) + ", outside the "
                                + "file's " + fileLength);
                    }
                    long end = start + size;
                    for (long at = start; at < end; ) {
                        CountingStream in = new CountingStream(new java.io.BufferedInputStream(
                                java.nio.channels.Channels.newInputStream(channel.position(at)), 512), end - at);
                        PageHeader page = Util.readPageHeader(in);
                        long compressed = page.getCompressed_page_size();
                        long uncompressed = page.getUncompressed_page_size();
                        if (compressed < 0 || at + in.count + compressed > end) {
                            throw lie(file, "the page at byte " + at + " of " + where + " claims " + compressed
                                    + " bytes, more than its column chunk holds");
                        }
                        if (uncompressed < 0 || uncompressed > PAGE_BYTES) {
                            throw lie(file, "the page at byte " + at + " of " + where + " claims " + uncompressed
                                    + " bytes uncompressed, over the " + BoundedFiles.size(PAGE_BYTES) + " a page holds");
                        }
                        at += in.count + compressed;
                    }
                }
            }
        }
    }

    private static UserError lie(Path file, String what) {
        return new UserError(file.toString(), "the Parquet file is damaged: " + what,
                "download or write the file again");
    }

    /** Counts the bytes a page header takes; never reads past its column chunk. */
    private static final class CountingStream extends java.io.FilterInputStream {
        private long count;
        private final long limit;

        CountingStream(java.io.InputStream in, long limit) {
            super(in);
            this.limit = limit;
        }

        @Override
        public int read() throws IOException {
            if (count >= limit) {
                throw new java.io.EOFException("a page header runs past its column chunk");
            }
            int b = super.read();
            count += b < 0 ? 0 : 1;
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (count >= limit) {
                throw new java.io.EOFException("a page header runs past its column chunk");
            }
            int n = super.read(b, off, (int) Math.min(len, limit - count));
            count += Math.max(0, n);
            return n;
        }
    }
}
