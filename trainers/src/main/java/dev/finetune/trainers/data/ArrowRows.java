package dev.finetune.trainers.data;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import dev.finetune.recipes.UserError;
import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.function.Consumer;
import org.apache.arrow.flatbuf.Buffer;
import org.apache.arrow.flatbuf.Field;
import org.apache.arrow.flatbuf.FieldNode;
import org.apache.arrow.flatbuf.FloatingPoint;
import org.apache.arrow.flatbuf.Int;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.Precision;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.flatbuf.Schema;
import org.apache.arrow.flatbuf.Type;

/**
 * {@code ds_type: arrow}: Arrow IPC files as {@code datasets} writes them ({@code save_to_disk}'s
 * {@code data-NNNNN-of-NNNNN.arrow}, streaming format) and Arrow's file format. The messages are read with the
 * format's own FlatBuffers classes; the column buffers are decoded here, for the types datasets stores text data in:
 * strings, binary, integers, floats, booleans, lists, structs, maps and nulls (a dictionary-encoded or compressed
 * file is refused with the way out).
 */
final class ArrowRows {
    private static final byte[] FILE_MAGIC = "ARROW1".getBytes(StandardCharsets.US_ASCII);

    private ArrowRows() {}

    static void read(Path file, Consumer<JsonRows.Row> sink) {
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(Files.newInputStream(file), 1 << 20))) {
            in.mark(8);
            byte[] magic = new byte[6];
            int got = in.readNBytes(magic, 0, 6);
            if (got == 6 && java.util.Arrays.equals(magic, FILE_MAGIC)) {
                in.readNBytes(2); // the file format's padding; its stream of messages follows
            } else {
                in.reset();
            }
            Schema schema = null;
            long row = 0;
            while (true) {
                ByteBuffer metadata = nextMessage(in);
                if (metadata == null) {
                    break;
                }
                Message message = Message.getRootAsMessage(metadata);
                byte[] body = in.readNBytes((int) message.bodyLength());
                if (body.length != message.bodyLength()) {
                    throw new EOFException("the file ends inside a message");
                }
                switch (message.headerType()) {
                    case MessageHeader.Schema -> schema = (Schema) message.header(new Schema());
                    case MessageHeader.RecordBatch -> {
                        if (schema == null) {
                            throw new IOException("a record batch before the schema");
                        }
                        RecordBatch batch = (RecordBatch) message.header(new RecordBatch());
                        if (batch.compression() != null) {
                            throw new UserError(file.toString(), "the Arrow file's buffers are compressed, which finetune "
                                    + "does not read", "write it uncompressed (datasets' save_to_disk does) or as Parquet");
                        }
                        for (JsonObject value : new Batch(schema, batch, ByteBuffer.wrap(body).order(ByteOrder.LITTLE_ENDIAN), file).rows()) {
                            sink.accept(new JsonRows.Row(value, file + " row " + row, null));
                            row++;
                        }
                    }
                    case MessageHeader.DictionaryBatch -> throw new UserError(file.toString(), "the Arrow file has "
                            + "dictionary-encoded columns, which finetune does not read", "save the data as Parquet "
                            + "(pyarrow.parquet.write_table) or decode the dictionaries first");
                    default -> {
                        // tensors are no rows: skipped
                    }
                }
            }
        } catch (IOException | RuntimeException e) {
            if (e instanceof UserError u) {
                throw u;
            }
            throw Rows.unreadable(file, "Arrow IPC", e);
        }
    }

    /** The next message's metadata, or {@code null} at the end-of-stream marker or the end of the file. */
    private static ByteBuffer nextMessage(DataInputStream in) throws IOException {
        int length;
        try {
            length = Integer.reverseBytes(in.readInt());
        } catch (EOFException e) {
            return null;
        }
        if (length == -1) { // continuation marker (format 0.15+), the length follows
            try {
                length = Integer.reverseBytes(in.readInt());
            } catch (EOFException e) {
                return null;
            }
        }
        if (length <= 0) {
            return null;
        }
        byte[] bytes = in.readNBytes(length);
        if (bytes.length != length) {
            throw new EOFException("the file ends inside a message header");
        }
        return ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
    }

    /** One record batch's columns, decoded in the order the format lays out nodes and buffers (depth first). */
    private static final class Batch {
        private final RecordBatch batch;
        private final ByteBuffer body;
        private final Path file;
        private int node;
        private int buffer;

        Batch(Schema schema, RecordBatch batch, ByteBuffer body, Path file) {
            this.batch = batch;
            this.body = body;
            this.file = file;
            this.columns = new ArrayList<>();
            for (int i = 0; i < schema.fieldsLength(); i++) {
                Field f = schema.fields(i);
                columns.add(new Named(f.name(), column(f)));
            }
        }

        private final List<Named> columns;

        private record Named(String name, Column column) {}

        List<JsonObject> rows() {
            List<JsonObject> rows = new ArrayList<>((int) batch.length());
            for (int r = 0; r < batch.length(); r++) {
                JsonObject o = new JsonObject();
                for (Named c : columns) {
                    o.add(c.name(), c.column().get(r));
                }
                rows.add(o);
            }
            return rows;
        }

        private ByteBuffer nextBuffer() {
            Buffer b = batch.buffers(buffer++);
            ByteBuffer slice = body.duplicate().order(ByteOrder.LITTLE_ENDIAN);
            slice.position((int) b.offset()).limit((int) (b.offset() + b.length()));
            return slice.slice().order(ByteOrder.LITTLE_ENDIAN);
        }

        private Column column(Field field) {
            if (field.dictionary() != null) {
                throw new UserError(file.toString(), "column '" + field.name() + "' is dictionary-encoded, which finetune"
                        + " does not read", "save the data as Parquet, or decode the dictionaries first");
            }
            FieldNode n = batch.nodes(node++);
            long length = n.length();
            byte type = field.typeType();
            if (type == Type.Null) {
                return r -> JsonNull.INSTANCE;
            }
            ByteBuffer validity = nextBuffer();
            Validity valid = new Validity(validity, n.nullCount() > 0 && validity.capacity() > 0);
            switch (type) {
                case Type.Utf8, Type.Binary, Type.LargeUtf8, Type.LargeBinary -> {
                    boolean large = type == Type.LargeUtf8 || type == Type.LargeBinary;
                    boolean text = type == Type.Utf8 || type == Type.LargeUtf8;
                    ByteBuffer offsets = nextBuffer();
                    ByteBuffer data = nextBuffer();
                    return r -> {
                        if (!valid.at(r)) {
                            return JsonNull.INSTANCE;
                        }
                        long from = large ? offsets.getLong(r * 8) : offsets.getInt(r * 4);
                        long to = large ? offsets.getLong((r + 1) * 8) : offsets.getInt((r + 1) * 4);
                        byte[] bytes = new byte[(int) (to - from)];
                        data.get((int) from, bytes);
                        return new JsonPrimitive(text ? new String(bytes, StandardCharsets.UTF_8)
                                : Base64.getEncoder().encodeToString(bytes));
                    };
                }
                case Type.Int -> {
                    Int t = (Int) field.type(new Int());
                    ByteBuffer data = nextBuffer();
                    int width = t.bitWidth() / 8;
                    boolean signed = t.isSigned();
                    return r -> {
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
                    ByteBuffer data = nextBuffer();
                    if (t.precision() == Precision.HALF) {
                        throw new UserError(file.toString(), "column '" + field.name() + "' holds 16-bit floats, which "
                                + "finetune does not read from Arrow files", "cast it to float32 or save as Parquet");
                    }
                    boolean single = t.precision() == Precision.SINGLE;
                    return r -> !valid.at(r) ? JsonNull.INSTANCE
                            : new JsonPrimitive(single ? data.getFloat(r * 4) : data.getDouble(r * 8));
                }
                case Type.Bool -> {
                    ByteBuffer data = nextBuffer();
                    return r -> !valid.at(r) ? JsonNull.INSTANCE : new JsonPrimitive(((data.get(r >> 3) >> (r & 7)) & 1) == 1);
                }
                case Type.List, Type.LargeList, Type.Map -> {
                    boolean large = type == Type.LargeList;
                    ByteBuffer offsets = nextBuffer();
                    Column child = column(field.children(0));
                    boolean map = type == Type.Map;
                    return r -> {
                        if (!valid.at(r)) {
                            return JsonNull.INSTANCE;
                        }
                        long from = large ? offsets.getLong(r * 8) : offsets.getInt(r * 4);
                        long to = large ? offsets.getLong((r + 1) * 8) : offsets.getInt((r + 1) * 4);
                        if (map) {
                            JsonObject o = new JsonObject();
                            for (long i = from; i < to; i++) {
                                JsonObject entry = child.get((int) i).getAsJsonObject();
                                var keys = entry.keySet().iterator();
                                JsonElement key = entry.get(keys.next());
                                o.add(key.isJsonPrimitive() ? key.getAsString() : key.toString(),
                                        keys.hasNext() ? entry.get(keys.next()) : JsonNull.INSTANCE);
                            }
                            return o;
                        }
                        JsonArray a = new JsonArray((int) (to - from));
                        for (long i = from; i < to; i++) {
                            a.add(child.get((int) i));
                        }
                        return a;
                    };
                }
                case Type.FixedSizeList -> {
                    int size = ((org.apache.arrow.flatbuf.FixedSizeList) field.type(new org.apache.arrow.flatbuf.FixedSizeList())).listSize();
                    Column child = column(field.children(0));
                    return r -> {
                        if (!valid.at(r)) {
                            return JsonNull.INSTANCE;
                        }
                        JsonArray a = new JsonArray(size);
                        for (int i = 0; i < size; i++) {
                            a.add(child.get(r * size + i));
                        }
                        return a;
                    };
                }
                case Type.Struct_ -> {
                    List<Named> children = new ArrayList<>();
                    for (int i = 0; i < field.childrenLength(); i++) {
                        children.add(new Named(field.children(i).name(), column(field.children(i))));
                    }
                    return r -> {
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
                default -> throw new UserError(file.toString(), "column '" + field.name() + "' has the Arrow type "
                        + Type.name(type) + ", which finetune does not read (" + length + " values)",
                        "cast it to a string, number, list or struct column, or save the data as Parquet");
            }
        }
    }

    private interface Column {
        JsonElement get(int row);
    }

    /** The validity bitmap; an absent one (no nulls) says every value is there. */
    private record Validity(ByteBuffer bits, boolean present) {
        boolean at(int row) {
            return !present || ((bits.get(row >> 3) >> (row & 7)) & 1) == 1;
        }
    }
}
