package dev.finetune.trainers.train.output;

import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.Locale;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * {@code use_tensorboard}: the scalars of {@code metrics.jsonl} as a TensorBoard event file, where and as the
 * Hugging Face Trainer's {@code TensorBoardCallback} writes them: {@code output_dir/runs/<date>_<host>/} (or
 * {@code $TENSORBOARD_LOGGING_DIR}), tags {@code train/<name>} and {@code eval/<name>} ({@code eval_loss} becomes
 * {@code eval/loss}), at the optimizer step.
 *
 * <p>The format is written here rather than through a library because no maintained Java one writes it without
 * TensorFlow's natives, and it is small: TFRecord framing (length, masked CRC-32C of the length, the bytes, their
 * masked CRC-32C) around {@code Event} protocol buffers, the first holding {@code file_version}, the others a
 * {@code Summary} of {@code simple_value}s, the form {@code torch.utils.tensorboard}'s {@code add_scalar} writes.
 */
public final class TensorBoardLog implements Closeable {
    public static final String ENV_DIR = "TENSORBOARD_LOGGING_DIR";
    private static final String FILE_VERSION = "brain.Event:2";
    private static final int MASK_DELTA = 0xa282ead8;

    private final Path file;
    private final OutputStream out;

    private TensorBoardLog(Path file, OutputStream out) {
        this.file = file;
        this.out = out;
    }

    /** A new event file for this run (a resumed run gets its own, as with HF). */
    public static TensorBoardLog open(Path outputDir) {
        String env = System.getenv(ENV_DIR);
        String host = host();
        Path dir = env != null && !env.isBlank() ? Path.of(env)
                : outputDir.resolve("runs").resolve(LocalDateTime.now()
                        .format(DateTimeFormatter.ofPattern("MMMdd_HH-mm-ss", Locale.ROOT)) + "_" + host);
        long seconds = System.currentTimeMillis() / 1000;
        Path file = dir.resolve(String.format(Locale.ROOT, "events.out.tfevents.%010d.%s.%d.0", seconds, host,
                ProcessHandle.current().pid()));
        try {
            Files.createDirectories(dir);
            TensorBoardLog log = new TensorBoardLog(file, Files.newOutputStream(file, StandardOpenOption.CREATE_NEW));
            log.record(event(wallTime(), 0, 3, FILE_VERSION.getBytes(StandardCharsets.UTF_8)));
            return log;
        } catch (IOException e) {
            throw new UncheckedIOException("could not write " + file, e);
        }
    }

    /** One metrics line's numbers at {@code step}; flushed, so TensorBoard shows them while the run goes on. */
    public void scalars(long step, Map<String, Object> line) {
        ByteArrayOutputStream summary = new ByteArrayOutputStream();
        line.forEach((key, value) -> {
            if (value instanceof Number n && !key.equals("step")) {
                ByteArrayOutputStream v = new ByteArrayOutputStream();
                bytesField(v, 1, tag(key).getBytes(StandardCharsets.UTF_8));
                v.write(2 << 3 | 5);
                int bits = Float.floatToIntBits(n.floatValue());
                for (int i = 0; i < 4; i++) {
                    v.write(bits >>> (8 * i));
                }
                bytesField(summary, 1, v.toByteArray());
            }
        });
        if (summary.size() > 0) {
            record(event(wallTime(), step, 5, summary.toByteArray()));
        }
    }

    /** HF's {@code rewrite_logs}: {@code eval_x} is {@code eval/x}, {@code test_x} {@code test/x}, the rest {@code train/x}. */
    static String tag(String key) {
        if (key.startsWith("eval_")) {
            return "eval/" + key.substring(5);
        }
        if (key.startsWith("test_")) {
            return "test/" + key.substring(5);
        }
        return "train/" + key;
    }

    public Path file() {
        return file;
    }

    @Override
    public void close() {
        try {
            out.close();
        } catch (IOException e) {
            throw new UncheckedIOException("could not close " + file, e);
        }
    }

    /** An {@code Event}: wall_time (1, double), step (2, int64) and one field of the {@code what} oneof. */
    private static byte[] event(double wallTime, long step, int field, byte[] payload) {
        ByteArrayOutputStream e = new ByteArrayOutputStream();
        e.write(1 << 3 | 1);
        long bits = Double.doubleToLongBits(wallTime);
        for (int i = 0; i < 8; i++) {
            e.write((int) (bits >>> (8 * i)));
        }
        if (step != 0) {
            e.write(2 << 3);
            varint(e, step);
        }
        bytesField(e, field, payload);
        return e.toByteArray();
    }

    private void record(byte[] data) {
        ByteBuffer header = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN);
        header.putLong(data.length);
        header.putInt(maskedCrc(header.array(), 0, 8));
        ByteBuffer footer = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(maskedCrc(data, 0, data.length));
        try {
            out.write(header.array());
            out.write(data);
            out.write(footer.array());
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException("could not write " + file, e);
        }
    }

    /** TFRecord's checksum: CRC-32C, rotated right by 15 bits plus a constant (a CRC of data holding CRCs is weak). */
    static int maskedCrc(byte[] bytes, int offset, int length) {
        CRC32C crc = new CRC32C();
        crc.update(bytes, offset, length);
        int c = (int) crc.getValue();
        return ((c >>> 15) | (c << 17)) + MASK_DELTA;
    }

    private static void bytesField(ByteArrayOutputStream out, int field, byte[] bytes) {
        out.write(field << 3 | 2);
        varint(out, bytes.length);
        out.writeBytes(bytes);
    }

    private static void varint(ByteArrayOutputStream out, long value) {
        while ((value & ~0x7FL) != 0) {
            out.write((int) (value & 0x7F) | 0x80);
            value >>>= 7;
        }
        out.write((int) value);
    }

    private static double wallTime() {
        return System.currentTimeMillis() / 1000.0;
    }

    private static String host() {
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            return "localhost";
        }
    }
}
