package dev.finetune.cli.reliability;

import com.google.flatbuffers.FlatBufferBuilder;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.arrow.flatbuf.Buffer;
import org.apache.arrow.flatbuf.Field;
import org.apache.arrow.flatbuf.FieldNode;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.MetadataVersion;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.flatbuf.Schema;
import org.apache.arrow.flatbuf.Type;
import org.apache.arrow.flatbuf.Utf8;
import org.apache.parquet.format.ColumnChunk;
import org.apache.parquet.format.ColumnMetaData;
import org.apache.parquet.format.CompressionCodec;
import org.apache.parquet.format.ConvertedType;
import org.apache.parquet.format.DataPageHeader;
import org.apache.parquet.format.Encoding;
import org.apache.parquet.format.FieldRepetitionType;
import org.apache.parquet.format.FileMetaData;
import org.apache.parquet.format.PageHeader;
import org.apache.parquet.format.PageType;
import org.apache.parquet.format.RowGroup;
import org.apache.parquet.format.SchemaElement;
import org.apache.parquet.format.Util;

/**
 * Parquet and Arrow files written byte by byte from the formats' own metadata classes, so that one field can lie
 * while the rest is a valid file (the same writer with no lie must read back: a case checks that). One column,
 * {@code text}, of UTF-8 strings.
 */
final class HostileDataFiles {
    private HostileDataFiles() {}

    /** What a Parquet file claims wrongly. */
    enum ParquetLie { NONE, FOOTER_LENGTH, CHUNK_SIZE, PAGE_COMPRESSED, PAGE_UNCOMPRESSED }

    /** What an Arrow stream claims wrongly. */
    enum ArrowLie { NONE, HEADER_LENGTH, BODY_LENGTH, VALUE_OFFSET, ROW_COUNT }

    /** A Parquet file: one row group, one uncompressed PLAIN data page holding {@code rows}. */
    static void parquet(Path file, List<String> rows, ParquetLie lie) throws IOException {
        ByteArrayOutputStream values = new ByteArrayOutputStream();
        for (String row : rows) {
            byte[] bytes = row.getBytes(StandardCharsets.UTF_8);
            values.write(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(bytes.length).array());
            values.write(bytes);
        }
        int size = values.size();
        PageHeader page = new PageHeader(PageType.DATA_PAGE, lie == ParquetLie.PAGE_UNCOMPRESSED ? Integer.MAX_VALUE
                : size, lie == ParquetLie.PAGE_COMPRESSED ? Integer.MAX_VALUE : size);
        page.setData_page_header(new DataPageHeader(rows.size(), Encoding.PLAIN, Encoding.RLE, Encoding.RLE));
        ByteArrayOutputStream header = new ByteArrayOutputStream();
        Util.writePageHeader(page, header);
        long chunk = header.size() + (long) size;
        try (OutputStream out = Files.newOutputStream(file)) {
            out.write("PAR1".getBytes(StandardCharsets.US_ASCII));
            header.writeTo(out);
            values.writeTo(out);
            ColumnMetaData meta = new ColumnMetaData(org.apache.parquet.format.Type.BYTE_ARRAY, List.of(Encoding.PLAIN,
                    Encoding.RLE), List.of("text"), CompressionCodec.UNCOMPRESSED, rows.size(), chunk,
                    lie == ParquetLie.CHUNK_SIZE ? 1L << 40 : chunk, 4);
            ColumnChunk column = new ColumnChunk(4);
            column.setMeta_data(meta);
            SchemaElement root = new SchemaElement("schema");
            root.setNum_children(1);
            SchemaElement text = new SchemaElement("text");
            text.setType(org.apache.parquet.format.Type.BYTE_ARRAY);
            text.setRepetition_type(FieldRepetitionType.REQUIRED);
            text.setConverted_type(ConvertedType.UTF8);
            FileMetaData footer = new FileMetaData(1, List.of(root, text), rows.size(),
                    List.of(new RowGroup(List.of(column), chunk, rows.size())));
            ByteArrayOutputStream footerBytes = new ByteArrayOutputStream();
            Util.writeFileMetaData(footer, footerBytes);
            footerBytes.writeTo(out);
            int footerLength = lie == ParquetLie.FOOTER_LENGTH ? Integer.MAX_VALUE - 1 : footerBytes.size();
            out.write(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(footerLength).array());
            out.write("PAR1".getBytes(StandardCharsets.US_ASCII));
        }
    }

    /** An Arrow IPC stream (as datasets' save_to_disk writes): the schema, one record batch of {@code rows}. */
    static void arrow(Path file, List<String> rows, ArrowLie lie) throws IOException {
        ByteArrayOutputStream data = new ByteArrayOutputStream();
        ByteBuffer offsets = ByteBuffer.allocate(4 * (rows.size() + 1)).order(ByteOrder.LITTLE_ENDIAN);
        offsets.putInt(0);
        for (int i = 0; i < rows.size(); i++) {
            data.write(rows.get(i).getBytes(StandardCharsets.UTF_8));
            offsets.putInt(i == rows.size() - 1 && lie == ArrowLie.VALUE_OFFSET ? Integer.MAX_VALUE - 8 : data.size());
        }
        int offsetsLength = pad(offsets.capacity());
        int dataLength = pad(data.size());
        long bodyLength = (long) offsetsLength + dataLength;
        try (OutputStream out = Files.newOutputStream(file)) {
            FlatBufferBuilder b = new FlatBufferBuilder();
            int name = b.createString("text");
            Utf8.startUtf8(b);
            int utf8 = Utf8.endUtf8(b);
            int field = Field.createField(b, name, true, Type.Utf8, utf8, 0, Field.createChildrenVector(b, new int[0]), 0);
            int schema = Schema.createSchema(b, (short) 0, Schema.createFieldsVector(b, new int[] {field}), 0, 0);
            message(out, b, MessageHeader.Schema, schema, 0, false);

            b = new FlatBufferBuilder();
            RecordBatch.startBuffersVector(b, 3);
            // written backwards, as flatbuffers builds vectors: validity (none), offsets, data
            Buffer.createBuffer(b, offsetsLength, dataLength);
            Buffer.createBuffer(b, 0, offsets.capacity());
            Buffer.createBuffer(b, 0, 0);
            int buffers = b.endVector();
            long length = lie == ArrowLie.ROW_COUNT ? Integer.MAX_VALUE : rows.size();
            RecordBatch.startNodesVector(b, 1);
            FieldNode.createFieldNode(b, length, 0);
            int nodes = b.endVector();
            int batch = RecordBatch.createRecordBatch(b, length, nodes, buffers, 0, 0);
            message(out, b, MessageHeader.RecordBatch, batch, lie == ArrowLie.BODY_LENGTH ? 1L << 40 : bodyLength,
                    lie == ArrowLie.HEADER_LENGTH);
            out.write(offsets.array());
            out.write(new byte[offsetsLength - offsets.capacity()]);
            data.writeTo(out);
            out.write(new byte[dataLength - data.size()]);
            out.write(new byte[] {-1, -1, -1, -1, 0, 0, 0, 0}); // end of stream
        }
    }

    private static void message(OutputStream out, FlatBufferBuilder b, byte type, int header, long bodyLength,
            boolean lyingLength) throws IOException {
        int message = Message.createMessage(b, MetadataVersion.V5, type, header, bodyLength, 0);
        b.finish(message);
        byte[] bytes = b.sizedByteArray();
        int length = pad(bytes.length);
        ByteBuffer prefix = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
        prefix.putInt(-1).putInt(lyingLength ? Integer.MAX_VALUE : length);
        out.write(prefix.array());
        out.write(bytes);
        out.write(new byte[length - bytes.length]);
    }

    private static int pad(int n) {
        return (n + 7) / 8 * 8;
    }
}
