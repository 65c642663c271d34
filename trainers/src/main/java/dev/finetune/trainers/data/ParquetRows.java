package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.file.Path;
import java.util.Base64;
import java.util.List;
import java.util.function.Consumer;
import org.apache.parquet.ParquetReadOptions;
import org.apache.parquet.column.page.PageReadStore;
import org.apache.parquet.conf.PlainParquetConfiguration;
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

    static void read(Path file, Consumer<JsonRows.Row> sink) {
        ParquetReadOptions options = ParquetReadOptions.builder(new PlainParquetConfiguration()).build();
        try (ParquetFileReader reader = new ParquetFileReader(new LocalInputFile(file), options)) {
            MessageType schema = reader.getFooter().getFileMetaData().getSchema();
            MessageColumnIO io = new ColumnIOFactory().getColumnIO(schema);
            long row = 0;
            PageReadStore pages;
            while ((pages = reader.readNextRowGroup()) != null) {
                RecordReader<JsonObject> records = io.getRecordReader(pages, new Materializer(schema));
                for (long i = 0; i < pages.getRowCount(); i++) {
                    JsonObject value = records.read();
                    sink.accept(new JsonRows.Row(value, file + " row " + row, null));
                    row++;
                }
            }
        } catch (IOException | RuntimeException e) {
            if (e instanceof dev.finetune.recipes.UserError u) {
                throw u;
            }
            throw Rows.unreadable(file, "Parquet", e);
        }
    }

    private static final class Materializer extends RecordMaterializer<JsonObject> {
        private final ObjectConverter root;
        private JsonObject current;

        Materializer(MessageType schema) {
            root = new ObjectConverter(schema, v -> current = (JsonObject) v);
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
    private static Converter converter(Type type, Consumer<JsonElement> sink) {
        if (type.isPrimitive()) {
            return new Primitive(type.asPrimitiveType(), sink);
        }
        GroupType group = type.asGroupType();
        LogicalTypeAnnotation logical = group.getLogicalTypeAnnotation();
        if (logical instanceof LogicalTypeAnnotation.ListLogicalTypeAnnotation && group.getFieldCount() == 1
                && group.getType(0).isRepetition(Type.Repetition.REPEATED)) {
            return new ListConverter(group, sink);
        }
        if ((logical instanceof LogicalTypeAnnotation.MapLogicalTypeAnnotation
                || logical == LogicalTypeAnnotation.MapKeyValueTypeAnnotation.getInstance())
                && group.getFieldCount() == 1 && !group.getType(0).isPrimitive()) {
            return new MapConverter(group, sink);
        }
        return new ObjectConverter(group, sink);
    }

    /** A field that is itself repeated (legacy lists): each value appended to the field's array. */
    private static Converter field(Type type, JsonObject[] owner) {
        String name = type.getName();
        if (type.isRepetition(Type.Repetition.REPEATED)) {
            return converter(type, v -> owner[0].getAsJsonArray(name).add(v));
        }
        return converter(type, v -> owner[0].add(name, v));
    }

    private static final class ObjectConverter extends GroupConverter {
        private final GroupType type;
        private final Converter[] fields;
        private final Consumer<JsonElement> sink;
        private final JsonObject[] current = new JsonObject[1];

        ObjectConverter(GroupType type, Consumer<JsonElement> sink) {
            this.type = type;
            this.sink = sink;
            List<Type> children = type.getFields();
            fields = new Converter[children.size()];
            for (int i = 0; i < fields.length; i++) {
                fields[i] = field(children.get(i), current);
            }
        }

        @Override
        public Converter getConverter(int index) {
            return fields[index];
        }

        @Override
        public void start() {
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

        ListConverter(GroupType list, Consumer<JsonElement> sink) {
            this.sink = sink;
            Type inner = list.getType(0);
            boolean elementIsInner = inner.isPrimitive() || inner.asGroupType().getFieldCount() != 1
                    || inner.getName().equals("array") || inner.getName().equals(list.getName() + "_tuple");
            if (elementIsInner) {
                repeated = converter(inner, v -> items.add(v));
            } else {
                Converter element = converter(inner.asGroupType().getType(0), v -> {
                    items.add(v);
                    got = true;
                });
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

        MapConverter(GroupType type, Consumer<JsonElement> sink) {
            this.sink = sink;
            GroupType kv = type.getType(0).asGroupType();
            Converter k = converter(kv.getType(0), v -> key = v);
            Converter v = kv.getFieldCount() > 1 ? converter(kv.getType(1), x -> value = x) : null;
            entry = new GroupConverter() {
                @Override
                public Converter getConverter(int index) {
                    return index == 0 ? k : v;
                }

                @Override
                public void start() {
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
        private final boolean text;
        private final int decimalScale;

        Primitive(PrimitiveType type, Consumer<JsonElement> sink) {
            this.sink = sink;
            LogicalTypeAnnotation logical = type.getLogicalTypeAnnotation();
            this.text = logical instanceof LogicalTypeAnnotation.StringLogicalTypeAnnotation
                    || logical instanceof LogicalTypeAnnotation.EnumLogicalTypeAnnotation
                    || logical instanceof LogicalTypeAnnotation.JsonLogicalTypeAnnotation;
            this.decimalScale = logical instanceof LogicalTypeAnnotation.DecimalLogicalTypeAnnotation d ? d.getScale() : -1;
        }

        @Override
        public void addBinary(Binary value) {
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
            sink.accept(new JsonPrimitive(value));
        }

        @Override
        public void addDouble(double value) {
            sink.accept(new JsonPrimitive(value));
        }

        @Override
        public void addFloat(float value) {
            sink.accept(new JsonPrimitive(value));
        }

        @Override
        public void addInt(int value) {
            sink.accept(decimalScale >= 0 ? new JsonPrimitive(BigDecimal.valueOf(value, decimalScale)) : new JsonPrimitive(value));
        }

        @Override
        public void addLong(long value) {
            sink.accept(decimalScale >= 0 ? new JsonPrimitive(BigDecimal.valueOf(value, decimalScale)) : new JsonPrimitive(value));
        }
    }
}
