package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import dev.finetune.recipes.BoundedFiles;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.file.Path;
import java.util.Base64;
import java.util.List;
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
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.io.api.Converter;
import org.apache.parquet.io.api.GroupConverter;
import org.apache.parquet.io.api.PrimitiveConverter;
import org.apache.parquet.io.api.RecordMaterializer;
import org.apache.parquet.schema.GroupType;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveType;
import org.apache.parquet.schema.Type;

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
            Materializer materializer = new Materializer(schema);
            PageReadStore pages;
            while ((pages = reader.readNextRowGroup()) != null) {
                RecordReader<JsonObject> records = io.getRecordReader(pages, materializer);
                for (long i = 0; i < pages.getRowCount(); i++) {
                    JsonObject value = records.read();
                    sink.accept(new JsonRows.Row(value, file + " row " + row, null));
                    row++;
                }
            }
        } catch (RowTooLarge e) {
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
                if (t instanceof RowTooLarge) {
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

    /** A row that grows past {@link BoundedFiles#LINE_BYTES} as it is built (a string, or a list of many values). */
    private static final class RowTooLarge extends RuntimeException {
        RowTooLarge() {
            super(null, null, false, false);
        }
    }

    /** What the row being built has cost so far, counted as it is built: values' bytes, 8 for each value. */
    private static final class Budget {
        private long spent;

        void reset() {
            spent = 0;
        }

        void spend(long bytes) {
            spent += bytes + 8;
            if (spent > BoundedFiles.LINE_BYTES) {
                throw new RowTooLarge();
            }
        }
    }

    private static final class Materializer extends RecordMaterializer<JsonObject> {
        private final ObjectConverter root;
        private JsonObject current;

        Materializer(MessageType schema) {
            Budget budget = new Budget();
            root = new ObjectConverter(schema, v -> current = (JsonObject) v, budget) {
                @Override
                public void start() {
                    budget.reset(); // a new row
                    super.start();
                }
            };
        }

        @Override
        public JsonObject getCurrentRecord() {
            return current;
        }

        @Override
        public GroupConverter getRootConverter() {
            return root;
        }
    }

    /** A converter for a field: a primitive, a LIST, a MAP or a struct, handing its value to {@code sink}. */
    private static Converter converter(Type type, Consumer<JsonElement> sink, Budget budget) {
        if (type.isPrimitive()) {
            return new Primitive(type.asPrimitiveType(), sink, budget);
        }
        GroupType group = type.asGroupType();
        LogicalTypeAnnotation logical = group.getLogicalTypeAnnotation();
        if (logical instanceof LogicalTypeAnnotation.ListLogicalTypeAnnotation && group.getFieldCount() == 1
                && group.getType(0).isRepetition(Type.Repetition.REPEATED)) {
            return new ListConverter(group, sink, budget);
        }
        if ((logical instanceof LogicalTypeAnnotation.MapLogicalTypeAnnotation
                || logical == LogicalTypeAnnotation.MapKeyValueTypeAnnotation.getInstance())
                && group.getFieldCount() == 1 && !group.getType(0).isPrimitive()) {
            return new MapConverter(group, sink, budget);
        }
        return new ObjectConverter(group, sink, budget);
    }

    /** A field that is itself repeated (legacy lists): each value appended to the field's array. */
    private static Converter field(Type type, JsonObject[] owner, Budget budget) {
        String name = type.getName();
        if (type.isRepetition(Type.Repetition.REPEATED)) {
            return converter(type, v -> owner[0].getAsJsonArray(name).add(v), budget);
        }
        return converter(type, v -> owner[0].add(name, v), budget);
    }

    private static class ObjectConverter extends GroupConverter {
        private final GroupType type;
        private final Converter[] fields;
        private final Consumer<JsonElement> sink;
        private final Budget budget;
        private final JsonObject[] current = new JsonObject[1];

        ObjectConverter(GroupType type, Consumer<JsonElement> sink, Budget budget) {
            this.type = type;
            this.sink = sink;
            this.budget = budget;
            List<Type> children = type.getFields();
            fields = new Converter[children.size()];
            for (int i = 0; i < fields.length; i++) {
                fields[i] = field(children.get(i), current, budget);
            }
        }

        @Override
        public Converter getConverter(int index) {
            return fields[index];
        }

        @Override
        public void start() {
            budget.spend(8L * type.getFieldCount());
            JsonObject o = new JsonObject();
            for (Type t : type.getFields()) {
                o.add(t.getName(), t.isRepetition(Type.Repetition.REPEATED) ? new JsonArray() : JsonNull.INSTANCE);
            }
            current[0] = o;
        }

        @Override
        public void end() {
            sink.accept(current[0]);
        }
    }

    /**
     * {@code group (LIST) { repeated group list { element } }}; also the legacy forms whose repeated group is the
     * element itself (a struct, or named {@code array} / {@code <field>_tuple}), and a repeated primitive.
     */
    private static final class ListConverter extends GroupConverter {
        private final Converter repeated;
        private final Consumer<JsonElement> sink;
        private JsonArray items;
        private boolean got;

        ListConverter(GroupType list, Consumer<JsonElement> sink, Budget budget) {
            this.sink = sink;
            Type inner = list.getType(0);
            boolean elementIsInner = inner.isPrimitive() || inner.asGroupType().getFieldCount() != 1
                    || inner.getName().equals("array") || inner.getName().equals(list.getName() + "_tuple");
            if (elementIsInner) {
                repeated = converter(inner, v -> items.add(v), budget);
            } else {
                Converter element = converter(inner.asGroupType().getType(0), v -> {
                    items.add(v);
                    got = true;
                }, budget);
                repeated = new GroupConverter() {
                    @Override
                    public Converter getConverter(int index) {
                        return element;
                    }

                    @Override
                    public void start() {
                        got = false;
                    }

                    @Override
                    public void end() {
                        if (!got) {
                            budget.spend(0); // a null element costs its slot: runs of them are free to encode
                            items.add(JsonNull.INSTANCE);
                        }
                    }
                };
            }
        }

        @Override
        public Converter getConverter(int index) {
            return repeated;
        }

        @Override
        public void start() {
            items = new JsonArray();
        }

        @Override
        public void end() {
            sink.accept(items);
        }
    }

    /** {@code group (MAP) { repeated group key_value { key; value } }} as an object keyed by the keys' text. */
    private static final class MapConverter extends GroupConverter {
        private final GroupConverter entry;
        private final Consumer<JsonElement> sink;
        private JsonObject map;
        private JsonElement key;
        private JsonElement value;

        MapConverter(GroupType type, Consumer<JsonElement> sink, Budget budget) {
            this.sink = sink;
            GroupType kv = type.getType(0).asGroupType();
            Converter k = converter(kv.getType(0), v -> key = v, budget);
            Converter v = kv.getFieldCount() > 1 ? converter(kv.getType(1), x -> value = x, budget) : null;
            entry = new GroupConverter() {
                @Override
                public Converter getConverter(int index) {
                    return index == 0 ? k : v;
                }

                @Override
                public void start() {
                    budget.spend(0);
                    key = JsonNull.INSTANCE;
                    value = JsonNull.INSTANCE;
                }

                @Override
                public void end() {
                    map.add(key.isJsonPrimitive() ? key.getAsString() : key.toString(), value);
                }
            };
        }

        @Override
        public Converter getConverter(int index) {
            return entry;
        }

        @Override
        public void start() {
            map = new JsonObject();
        }

        @Override
        public void end() {
            sink.accept(map);
        }
    }

    private static final class Primitive extends PrimitiveConverter {
        private final Consumer<JsonElement> sink;
        private final Budget budget;
        private final boolean text;
        private final int decimalScale;

        Primitive(PrimitiveType type, Consumer<JsonElement> sink, Budget budget) {
            this.sink = sink;
            this.budget = budget;
            LogicalTypeAnnotation logical = type.getLogicalTypeAnnotation();
            this.text = logical instanceof LogicalTypeAnnotation.StringLogicalTypeAnnotation
                    || logical instanceof LogicalTypeAnnotation.EnumLogicalTypeAnnotation
                    || logical instanceof LogicalTypeAnnotation.JsonLogicalTypeAnnotation;
            this.decimalScale = logical instanceof LogicalTypeAnnotation.DecimalLogicalTypeAnnotation d ? d.getScale() : -1;
        }

        @Override
        public void addBinary(Binary value) {
            budget.spend(value.length()); // before the string is made
            if (text) {
                sink.accept(new JsonPrimitive(value.toStringUsingUTF8()));
            } else if (decimalScale >= 0) {
                sink.accept(new JsonPrimitive(new BigDecimal(new BigInteger(value.getBytes()), decimalScale)));
            } else {
                sink.accept(new JsonPrimitive(Base64.getEncoder().encodeToString(value.getBytes())));
            }
        }

        @Override
        public void addBoolean(boolean value) {
            budget.spend(0);
            sink.accept(new JsonPrimitive(value));
        }

        @Override
        public void addDouble(double value) {
            budget.spend(0);
            sink.accept(new JsonPrimitive(value));
        }

        @Override
        public void addFloat(float value) {
            budget.spend(0);
            sink.accept(new JsonPrimitive(value));
        }

        @Override
        public void addInt(int value) {
            budget.spend(0);
            sink.accept(decimalScale >= 0 ? new JsonPrimitive(BigDecimal.valueOf(value, decimalScale)) : new JsonPrimitive(value));
        }

        @Override
        public void addLong(long value) {
            budget.spend(0);
            sink.accept(decimalScale >= 0 ? new JsonPrimitive(BigDecimal.valueOf(value, decimalScale)) : new JsonPrimitive(value));
        }
    }
}
