package dev.finetune.trainers.data;

import dev.finetune.recipes.BoundedFiles;
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
import java.util.function.Consumer;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.flatbuf.Schema;

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
        long row = 0;
        try (Position position = new Position(new BufferedInputStream(Files.newInputStream(file), 1 << 20));
                DataInputStream in = new DataInputStream(position)) {
            long fileLength = Files.size(file);
            in.mark(8);
            byte[] magic = new byte[6];
            int got = in.readNBytes(magic, 0, 6);
            if (got == 6 && java.util.Arrays.equals(magic, FILE_MAGIC)) {
                in.readNBytes(2); // the file format's padding; its stream of messages follows
            } else {
                in.reset();
            }
            Schema schema = null;
            while (true) {
                long at = position.count;
                ByteBuffer metadata = nextMessage(in, file, at);
                if (metadata == null) {
                    break;
                }
                Message message = Message.getRootAsMessage(metadata);
                // what the header claims, checked before a buffer that size is made
                long bodyLength = message.bodyLength();
                if (bodyLength < 0 || bodyLength > fileLength - position.count) {
                    throw damaged(file, "the message at byte " + at + " claims a body of " + bodyLength
                            + " bytes, more than the " + (fileLength - position.count) + " left in the file");
                }
                if (bodyLength > Integer.MAX_VALUE - 16) {
                    throw new UserError(file.toString(), "the record batch at byte " + at + " holds "
                            + (bodyLength >> 20) + " MiB, over the 2 GiB finetune reads at once",
                            "write the file in smaller batches (pyarrow: max_chunksize=, datasets: writer_batch_size=)");
                }
                byte[] body = in.readNBytes((int) bodyLength);
                if (body.length != bodyLength) {
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
                        ArrowBatch rows = new ArrowBatch(schema, batch, ByteBuffer.wrap(body).order(ByteOrder.LITTLE_ENDIAN), file, at);
                        for (int r = 0; r < batch.length(); r++) {
                            sink.accept(new JsonRows.Row(rows.row(r), file + " row " + row, null));
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
        } catch (ArrowBatch.RowTooLarge e) {
            throw Rows.rowTooLarge(file, row);
        } catch (IOException | RuntimeException e) {
            if (e instanceof UserError u) {
                throw u;
            }
            throw Rows.unreadable(file, "Arrow IPC", e);
        }
    }

    static UserError damaged(Path file, String what) {
        return new UserError(file.toString(), "the Arrow file is damaged: " + what, "download or write the file again");
    }

    /** Counts the bytes read, for the offsets in messages. */
    private static final class Position extends java.io.FilterInputStream {
        private long count;
        private long marked;

        Position(InputStream in) {
            super(in);
        }

        @Override
        public int read() throws IOException {
            int b = super.read();
            count += b < 0 ? 0 : 1;
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = super.read(b, off, len);
            count += Math.max(0, n);
            return n;
        }

        @Override
        public long skip(long n) throws IOException {
            long skipped = super.skip(n);
            count += skipped;
            return skipped;
        }

        @Override
        public synchronized void mark(int limit) {
            super.mark(limit);
            marked = count;
        }

        @Override
        public synchronized void reset() throws IOException {
            super.reset();
            count = marked;
        }
    }

    /** The next message's metadata, or {@code null} at the end-of-stream marker or the end of the file. */
    private static ByteBuffer nextMessage(DataInputStream in, Path file, long at) throws IOException {
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
        if (length == 0) {
            return null;
        }
        if (length < 0 || length > BoundedFiles.METADATA_BYTES) {
            throw damaged(file, "the message at byte " + at + " claims a header of " + Integer.toUnsignedLong(length)
                    + " bytes, over the " + BoundedFiles.size(BoundedFiles.METADATA_BYTES) + " a header holds");
        }
        byte[] bytes = in.readNBytes(length);
        if (bytes.length != length) {
            throw new EOFException("the file ends inside a message header");
        }
        return ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
    }

}
