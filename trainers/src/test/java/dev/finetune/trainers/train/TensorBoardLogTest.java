package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.trainers.parity.PythonStack;
import dev.finetune.trainers.train.output.MetricsLog;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import java.util.zip.CRC32C;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code use_tensorboard}: the event file holds what {@code metrics.jsonl} holds, under HF's tags. Decoded here by
 * a reader written from the format's description (TFRecord framing with masked CRC-32C, {@code Event} and
 * {@code Summary} protocol buffers), and by TensorBoard's own loader from the pinned Python stack.
 */
public class TensorBoardLogTest {

    /** One decoded {@code Event}. */
    public record Event(double wallTime, long step, String fileVersion, Map<String, Float> scalars) {}

    @Test
    void theEventFileHoldsEveryLoggedLineUnderHfTags(@TempDir Path dir) throws IOException {
        Path out = train(dir);
        List<Event> events = read(eventFile(out));
        assertEquals("brain.Event:2", events.get(0).fileVersion(), "the first event names the format version");
        assertTrue(events.get(0).wallTime() > 1.6e9, "wall time in seconds since 1970: " + events.get(0).wallTime());
        List<JsonObject> lines = MetricsLog.read(out.resolve(MetricsLog.FILE));
        assertEquals(List.of(0L, 2L, 4L, 5L), lines.stream().map(l -> l.get("step").getAsLong()).toList());
        List<Event> scalars = events.subList(1, events.size());
        for (JsonObject line : lines) {
            long step = line.get("step").getAsLong();
            Event event = scalars.stream().filter(e -> e.step() == step).findFirst().orElseThrow(
                    () -> new AssertionError("no event at step " + step));
            for (String key : line.keySet()) {
                if (key.equals("step") || !line.get(key).isJsonPrimitive()) {
                    continue;
                }
                String tag = key.startsWith("eval_") ? "eval/" + key.substring(5) : "train/" + key;
                assertEquals((float) line.get(key).getAsDouble(), event.scalars().get(tag), tag + " at step " + step);
            }
            assertEquals(line.keySet().stream().filter(k -> !k.equals("step")).count(), event.scalars().size(),
                    "one scalar per number of the line: " + event.scalars().keySet());
        }
        Event last = scalars.get(scalars.size() - 1);
        assertEquals(5, last.step());
        assertTrue(last.scalars().containsKey("train/train_loss") && last.scalars().containsKey("train/train_runtime"),
                "the run summary comes last, as HF's final log: " + last.scalars().keySet());
        assertEquals(lines.size() + 2, events.size(), "version, one event per line, the summary");
    }

    /** TensorBoard's own loader (pinned in requirements.txt) reads what our reader reads. */
    @Test
    void tensorBoardItselfReadsTheSameNumbers(@TempDir Path dir) throws Exception {
        Path python = PythonStack.python();
        Path out = train(dir);
        Path script = PythonStack.script("/parity/tensorboard_read.py", dir);
        Process p = new ProcessBuilder(python.toString(), script.toString(), eventFile(out).getParent().toString())
                .redirectErrorStream(false).start();
        String json = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(300, TimeUnit.SECONDS) && p.exitValue() == 0,
                new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8));
        JsonObject tags = JsonParser.parseString(json.strip()).getAsJsonObject();
        Map<String, Map<Long, Float>> expected = new TreeMap<>();
        for (Event e : read(eventFile(out))) {
            e.scalars().forEach((tag, v) -> expected.computeIfAbsent(tag, t -> new TreeMap<>()).put(e.step(), v));
        }
        Map<String, Map<Long, Float>> got = new TreeMap<>();
        for (Map.Entry<String, JsonElement> tag : tags.entrySet()) {
            for (JsonElement point : tag.getValue().getAsJsonArray()) {
                JsonArray a = point.getAsJsonArray();
                got.computeIfAbsent(tag.getKey(), t -> new TreeMap<>()).put(a.get(0).getAsLong(), a.get(1).getAsFloat());
            }
        }
        assertEquals(expected, got);
        assertTrue(got.containsKey("train/loss") && got.containsKey("eval/loss"), got.keySet().toString());
    }

    /** Five steps, logged every second step, evaluated before and after. */
    private static Path train(Path dir) {
        List<SftBatch> data = ToyData.batches(4, 2, 6, 11, 3);
        Path out = dir.resolve("out");
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 11, 8, 2, 0.0, true, 5);
            TestRuns options = TestRuns.in(out).maxSteps(5).learningRate(0.05).scheduler(LrScheduler.CONSTANT)
                    .logEvery(2).tensorBoard(true);
            new Trainer<>(model, new SftObjective(), data, data.subList(0, 1), options.build(data.size()), manager,
                    new Trainer.Listener() {}).run();
        }
        return out;
    }

    private static Path eventFile(Path out) throws IOException {
        try (Stream<Path> files = Files.walk(out.resolve("runs"))) {
            List<Path> found = files.filter(f -> f.getFileName().toString().startsWith("events.out.tfevents.")).toList();
            assertEquals(1, found.size(), "one event file under runs/<date>_<host>/: " + found);
            assertEquals(out.resolve("runs"), found.get(0).getParent().getParent());
            return found.get(0);
        }
    }

    /** TFRecord: u64 length, masked CRC of those 8 bytes, the record, masked CRC of the record; little endian. */
    public static List<Event> read(Path file) throws IOException {
        ByteBuffer in = ByteBuffer.wrap(Files.readAllBytes(file)).order(ByteOrder.LITTLE_ENDIAN);
        List<Event> events = new ArrayList<>();
        while (in.hasRemaining()) {
            byte[] header = new byte[8];
            in.get(header);
            assertEquals(masked(header), in.getInt(), "length checksum of record " + events.size());
            byte[] data = new byte[(int) ByteBuffer.wrap(header).order(ByteOrder.LITTLE_ENDIAN).getLong()];
            in.get(data);
            assertEquals(masked(data), in.getInt(), "data checksum of record " + events.size());
            events.add(event(ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN)));
        }
        return events;
    }

    private static int masked(byte[] bytes) {
        CRC32C crc = new CRC32C();
        crc.update(bytes);
        long c = crc.getValue();
        // TensorFlow's crc32c::Mask: rotate right by 15 bits, add a constant, modulo 2^32
        return (int) ((((c >> 15) | (c << 17)) + 0xa282ead8L) & 0xffffffffL);
    }

    private static Event event(ByteBuffer b) {
        double wall = 0;
        long step = 0;
        String version = null;
        Map<String, Float> scalars = new LinkedHashMap<>();
        while (b.hasRemaining()) {
            int key = (int) varint(b);
            switch (key) {
                case 1 << 3 | 1 -> wall = b.getDouble();
                case 2 << 3 -> step = varint(b);
                case 3 << 3 | 2 -> version = new String(bytes(b), StandardCharsets.UTF_8);
                case 5 << 3 | 2 -> {
                    ByteBuffer summary = ByteBuffer.wrap(bytes(b)).order(ByteOrder.LITTLE_ENDIAN);
                    while (summary.hasRemaining()) {
                        assertEquals(1 << 3 | 2, varint(summary), "Summary.value");
                        ByteBuffer value = ByteBuffer.wrap(bytes(summary)).order(ByteOrder.LITTLE_ENDIAN);
                        String tag = null;
                        Float simple = null;
                        while (value.hasRemaining()) {
                            int field = (int) varint(value);
                            if (field == (1 << 3 | 2)) {
                                tag = new String(bytes(value), StandardCharsets.UTF_8);
                            } else if (field == (2 << 3 | 5)) {
                                simple = value.getFloat();
                            } else {
                                throw new AssertionError("unexpected Summary.Value field " + field);
                            }
                        }
                        scalars.put(tag, simple);
                    }
                }
                default -> throw new AssertionError("unexpected Event field " + key);
            }
        }
        return new Event(wall, step, version, scalars);
    }

    private static byte[] bytes(ByteBuffer b) {
        byte[] out = new byte[(int) varint(b)];
        b.get(out);
        return out;
    }

    private static long varint(ByteBuffer b) {
        long value = 0;
        for (int shift = 0; ; shift += 7) {
            byte x = b.get();
            value |= (long) (x & 0x7f) << shift;
            if (x >= 0) {
                return value;
            }
        }
    }
}
