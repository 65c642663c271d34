package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import dev.finetune.recipes.BoundedFiles;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Base64;
import java.util.List;
import java.util.function.Consumer;
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
 * A Parquet record as the JSON object {@code datasets} would give for it (see {@link ParquetRows}), built by
 * parquet-java's converters; each row's cost is counted as it is built, so a row past the line bound stops early.
 */
final class ParquetJson {
    private ParquetJson() {}

    /** A row that grows past {@link BoundedFiles#LINE_BYTES} as it is built (a string, or a list of many values). */
    static final class RowTooLarge extends RuntimeException {
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

    static final class Materializer extends RecordMaterializer<JsonObject> {
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
