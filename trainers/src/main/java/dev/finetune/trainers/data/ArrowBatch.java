package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import dev.finetune.recipes.BoundedFiles;
import dev.finetune.recipes.UserError;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import org.apache.arrow.flatbuf.Buffer;
import org.apache.arrow.flatbuf.Field;
import org.apache.arrow.flatbuf.FieldNode;
import org.apache.arrow.flatbuf.FloatingPoint;
import org.apache.arrow.flatbuf.Int;
import org.apache.arrow.flatbuf.Precision;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.flatbuf.Schema;
import org.apache.arrow.flatbuf.Type;
/**
 * One record batch's columns, decoded in the order the format lays out nodes and buffers (depth first). Nothing
 * the batch's metadata says is taken on trust: every buffer lies inside the body, holds what its node's length
 * needs, every offset points inside its data, and a row costs at most {@link BoundedFiles#LINE_BYTES} as built.
 */
final class ArrowBatch {
    /** Nested types deeper than any dataset's: the schema is walked recursively. */
    private static final int MAX_DEPTH = 64;

    private final RecordBatch batch;
    private final ByteBuffer body;
    private final Path file;
    private final long at;
    private final List<Named> columns = new ArrayList<>();
    private int node;
    private int buffer;
    private long spent;

    ArrowBatch(Schema schema, RecordBatch batch, ByteBuffer body, Path file, long at) {
        this.batch = batch;
        this.body = body;
        this.file = file;
        this.at = at;
        // every row costs at least a bit of some buffer; a batch of more rows than that is a lie, not data
        if (batch.length() < 0 || batch.length() > 8L * body.capacity() + 64) {
            throw lie("it claims " + batch.length() + " rows in a body of " + body.capacity() + " bytes");
        }
        for (int i = 0; i < schema.fieldsLength(); i++) {
            Field f = schema.fields(i);
            columns.add(new Named(f.name(), column(f, batch.length(), 0)));
        }
    }

    private record Named(String name, Column column) {}

    JsonObject row(int r) {
        spent = 0;
        JsonObject o = new JsonObject();
        for (Named c : columns) {
            o.add(c.name(), c.column().get(r));
        }
        return o;
    }

    /** Counts a value of {@code bytes} (and 8 for its slot) into the row being built. */
    private void spend(long bytes) {
        spent += bytes + 8;
        if (spent > BoundedFiles.LINE_BYTES) {
            throw new RowTooLarge();
        }
    }

    private UserError lie(String what) {
        return ArrowRows.damaged(file, "the record batch at byte " + at + ": " + what);
    }

    private ByteBuffer nextBuffer(String column, long needs) {
        if (buffer >= batch.buffersLength()) {
            throw lie("column '" + column + "' has fewer buffers than its type needs");
        }
        Buffer b = batch.buffers(buffer++);
        if (b.offset() < 0 || b.length() < 0 || b.offset() + b.length() > body.capacity()) {
            throw lie("a buffer of column '" + column + "' lies at bytes " + b.offset() + " to "
                    + (b.offset() + b.length()) + ", outside the body's " + body.capacity());
        }
        if (b.length() < needs) {
            throw lie("a buffer of column '" + column + "' holds " + b.length() + " bytes, its values need " + needs);
        }
        ByteBuffer slice = body.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        slice.position((int) b.offset()).limit((int) (b.offset() + b.length()));
        return slice.slice().order(ByteOrder.LITTLE_ENDIAN);
    }

    /** A column of at least {@code rows} values; its values past its node's length are refused when asked. */
    private Column column(Field field, long rows, int depth) {
        if (depth > MAX_DEPTH) {
            throw lie("column '" + field.name() + "' nests more than " + MAX_DEPTH + " types deep");
        }
        int own = node; // its children's nodes follow it
        Column read = read(field, rows, depth);
        long length = batch.nodes(own).length();
        return r -> {
            if (r < 0 || r >= length) {
                throw lie("a value of column '" + field.name() + "' past its " + length);
            }
            return read.get(r);
        };
    }

    private Column read(Field field, long rows, int depth) {
        if (field.dictionary() != null) {
            throw new UserError(file.toString(), "column '" + field.name() + "' is dictionary-encoded, which finetune"
                    + " does not read", "save the data as Parquet, or decode the dictionaries first");
        }
        if (node >= batch.nodesLength()) {
            throw lie("it has fewer field nodes than its schema has columns");
        }
        FieldNode n = batch.nodes(node++);
        long length = n.length();
        String name = field.name();
        if (length < rows || length > 8L * body.capacity() + 64) {
            throw lie("column '" + name + "' claims " + length + " values");
        }
        byte type = field.typeType();
        if (type == Type.Null) {
            return r -> JsonNull.INSTANCE;
        }
        long bits = (length + 7) / 8;
        ByteBuffer validity = nextBuffer(name, 0);
        boolean nullable = n.nullCount() > 0 && validity.capacity() > 0;
        if (nullable && validity.capacity() < bits) {
            throw lie("the validity buffer of column '" + name + "' is shorter than its " + length + " values");
        }
        Validity valid = new Validity(validity, nullable);
        switch (type) {
            case Type.Utf8, Type.Binary, Type.LargeUtf8, Type.LargeBinary -> {
                boolean large = type == Type.LargeUtf8 || type == Type.LargeBinary;
                boolean text = type == Type.Utf8 || type == Type.LargeUtf8;
                ByteBuffer offsets = nextBuffer(name, (length + 1) * (large ? 8 : 4));
                ByteBuffer data = nextBuffer(name, 0);
                return r -> {
                    if (!valid.at(r)) {
                        spend(0);
                        return JsonNull.INSTANCE;
                    }
                    long from = large ? offsets.getLong(r * 8) : offsets.getInt(r * 4);
                    long to = large ? offsets.getLong((r + 1) * 8) : offsets.getInt((r + 1) * 4);
                    if (from < 0 || to < from || to > data.capacity()) {
                        throw lie("value " + r + " of column '" + name + "' lies at bytes " + from + " to " + to
                                + ", outside its data's " + data.capacity());
                    }
                    spend(to - from); // before the bytes are copied
                    byte[] bytes = new byte[(int) (to - from)];
                    data.get((int) from, bytes);
                    return new JsonPrimitive(text ? new String(bytes, StandardCharsets.UTF_8)
                            : Base64.getEncoder().encodeToString(bytes));
                };
            }
            case Type.Int -> {
                Int t = (Int) field.type(new Int());
                int width = t.bitWidth() / 8;
                if (width != 1 && width != 2 && width != 4 && width != 8) {
                    throw lie("column '" + name + "' has integers of " + t.bitWidth() + " bits");
                }
                ByteBuffer data = nextBuffer(name, length * width);
                boolean signed = t.isSigned();
                return r -> {
                    spend(0);
                    if (!valid.at(r)) {
                        return JsonNull.INSTANCE;
                    }
                    return switch (width) {
                        case 1 -> new JsonPrimitive(signed ? data.get(r) : data.get(r) & 0xFF);
                        case 2 -> new JsonPrimitive(signed ? data.getShort(r * 2) : data.getShort(r * 2) & 0xFFFF);
                        case 4 -> new JsonPrimitive(signed ? data.getInt(r * 4) : data.getInt(r * 4) & 0xFFFFFFFFL);
                        default -> new JsonPrimitive(signed ? data.getLong(r * 8)
                                : new java.math.BigInteger(Long.toUnsignedString(data.getLong(r * 8))));
                    };
                };
            }
            case Type.FloatingPoint -> {
                FloatingPoint t = (FloatingPoint) field.type(new FloatingPoint());
                if (t.precision() == Precision.HALF) {
                    throw new UserError(file.toString(), "column '" + name + "' holds 16-bit floats, which "
                            + "finetune does not read from Arrow files", "cast it to float32 or save as Parquet");
                }
                boolean single = t.precision() == Precision.SINGLE;
                ByteBuffer data = nextBuffer(name, length * (single ? 4 : 8));
                return r -> {
                    spend(0);
                    return !valid.at(r) ? JsonNull.INSTANCE
                            : new JsonPrimitive(single ? data.getFloat(r * 4) : data.getDouble(r * 8));
                };
            }
            case Type.Bool -> {
                ByteBuffer data = nextBuffer(name, bits);
                return r -> {
                    spend(0);
                    return !valid.at(r) ? JsonNull.INSTANCE : new JsonPrimitive(((data.get(r >> 3) >> (r & 7)) & 1) == 1);
                };
            }
            case Type.List, Type.LargeList, Type.Map -> {
                boolean large = type == Type.LargeList;
                ByteBuffer offsets = nextBuffer(name, (length + 1) * (large ? 8 : 4));
                if (field.childrenLength() != 1) {
                    throw lie("list column '" + name + "' has " + field.childrenLength() + " child types");
                }
                Column child = column(field.children(0), 0, depth + 1);
                boolean map = type == Type.Map;
                return r -> {
                    spend(0);
                    if (!valid.at(r)) {
                        return JsonNull.INSTANCE;
                    }
                    long from = large ? offsets.getLong(r * 8) : offsets.getInt(r * 4);
                    long to = large ? offsets.getLong((r + 1) * 8) : offsets.getInt((r + 1) * 4);
                    if (from < 0 || to < from || to > Integer.MAX_VALUE) {
                        throw lie("list " + r + " of column '" + name + "' claims elements " + from + " to " + to);
                    }
                    if (map) {
                        JsonObject o = new JsonObject();
                        for (long i = from; i < to; i++) {
                            JsonElement e = child.get((int) i);
                            if (!e.isJsonObject() || e.getAsJsonObject().size() == 0) {
                                throw lie("an entry of map column '" + name + "' is not a key and a value");
                            }
                            JsonObject entry = e.getAsJsonObject();
                            var keys = entry.keySet().iterator();
                            JsonElement key = entry.get(keys.next());
                            o.add(key.isJsonPrimitive() ? key.getAsString() : key.toString(),
                                    keys.hasNext() ? entry.get(keys.next()) : JsonNull.INSTANCE);
                        }
                        return o;
                    }
                    JsonArray a = new JsonArray();
                    for (long i = from; i < to; i++) {
                        spend(0); // an element costs its slot, even a null one that costs no buffer
                        a.add(child.get((int) i));
                    }
                    return a;
                };
            }
            case Type.FixedSizeList -> {
                int size = ((org.apache.arrow.flatbuf.FixedSizeList) field.type(new org.apache.arrow.flatbuf.FixedSizeList())).listSize();
                if (size < 0 || field.childrenLength() != 1) {
                    throw lie("fixed-size list column '" + name + "' claims lists of " + size);
                }
                Column child = column(field.children(0), 0, depth + 1);
                return r -> {
                    spend(0);
                    if (!valid.at(r)) {
                        return JsonNull.INSTANCE;
                    }
                    JsonArray a = new JsonArray();
                    for (long i = 0; i < size; i++) {
                        spend(0);
                        long index = (long) r * size + i;
                        a.add(child.get(index > Integer.MAX_VALUE ? -1 : (int) index));
                    }
                    return a;
                };
            }
            case Type.Struct_ -> {
                List<Named> children = new ArrayList<>();
                for (int i = 0; i < field.childrenLength(); i++) {
                    children.add(new Named(field.children(i).name(), column(field.children(i), length, depth + 1)));
                }
                return r -> {
                    spend(0);
                    if (!valid.at(r)) {
                        return JsonNull.INSTANCE;
                    }
                    JsonObject o = new JsonObject();
                    for (Named c : children) {
                        o.add(c.name(), c.column().get(r));
                    }
                    return o;
                };
            }
            default -> throw new UserError(file.toString(), "column '" + name + "' has the Arrow type "
                    + Type.name(type) + ", which finetune does not read (" + length + " values)",
                    "cast it to a string, number, list or struct column, or save the data as Parquet");
        }
    }

    /** A row that grows past {@link BoundedFiles#LINE_BYTES} as it is built. */
    static final class RowTooLarge extends RuntimeException {
        RowTooLarge() {
            super(null, null, false, false);
        }
    }

    interface Column {
        JsonElement get(int row);
    }

    /** The validity bitmap; an absent one (no nulls) says every value is there. */
    record Validity(ByteBuffer bits, boolean present) {
        boolean at(int row) {
            return !present || ((bits.get(row >> 3) >> (row & 7)) & 1) == 1;
        }
    }
}
