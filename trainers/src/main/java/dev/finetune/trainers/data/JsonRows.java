package dev.finetune.trainers.data;

import com.google.gson.Gson;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.Strictness;
import com.google.gson.TypeAdapter;
import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;
import com.google.gson.stream.MalformedJsonException;
import dev.finetune.recipes.BoundedFiles;
import dev.finetune.recipes.UserError;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.Reader;
import java.io.StringReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The rows of a JSON file: JSON Lines (one object per line) or one JSON array of objects, gzipped or not. Every row
 * carries its {@code file:line} so a broken one can be pointed at.
 */
public final class JsonRows {
    private static final TypeAdapter<JsonElement> ELEMENT = new Gson().getAdapter(JsonElement.class);
    private static final Pattern GSON_LINE = Pattern.compile(" at line (\\d+) column");

    /** One row, or the reason it is not one. Exactly one of {@code value} and {@code problem} is set. */
    public record Row(JsonObject value, String location, InvalidRow problem) {}

    private JsonRows() {}

    /** Feeds every row of {@code file} to {@code sink}, in file order. */
    static void read(Path file, Consumer<Row> sink) {
        BoundedFiles.requireRegular(file, "the dataset");
        int first;
        try (BufferedReader reader = new BufferedReader(new java.io.InputStreamReader(Rows.open(file),
                StandardCharsets.UTF_8), 1 << 16)) {
            do {
                first = reader.read();
            } while (first == 0xFEFF || (first >= 0 && Character.isWhitespace(first)));
        } catch (IOException e) {
            first = -1; // not UTF-8 at its start: read as lines, which reports the line
        }
        try {
            if (first == '[') {
                try (BufferedReader reader = new BufferedReader(new java.io.InputStreamReader(Rows.open(file),
                        StandardCharsets.UTF_8), 1 << 16)) {
                    readArray(file, new ElementBound(reader), sink);
                }
            } else {
                readLines(file, sink);
            }
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot read the dataset: " + e.getMessage(), "check the file");
        }
    }

    /**
     * Each line at most {@link BoundedFiles#LINE_BYTES} (a file without line breaks is one clear error, not all
     * memory); a line that is not UTF-8 is a row problem like any other.
     */
    private static void readLines(Path file, Consumer<Row> sink) throws IOException {
        String name = file.toString();
        // a .gz file's lines are bounded as they come out of the decompressor
        try (BoundedFiles.Lines lines = new BoundedFiles.Lines(file, Rows.open(file), BoundedFiles.LINE_BYTES)) {
            for (BoundedFiles.Lines.Line read; (read = lines.next()) != null; ) {
                String location = name + ":" + read.number();
                String line = read.text();
                if (line == null) {
                    sink.accept(new Row(null, location, new InvalidRow("the line is not valid UTF-8 text",
                            "save the file as UTF-8 (or remove the line)")));
                    continue;
                }
                if (read.number() == 1 && line.startsWith("\uFEFF")) {
                    line = line.substring(1);
                }
                if (line.isBlank()) {
                    continue;
                }
                try {
                    JsonElement element = parseLine(line);
                    if (element.isJsonObject()) {
                        sink.accept(new Row(element.getAsJsonObject(), location, null));
                    } else {
                        sink.accept(new Row(null, location, new InvalidRow("the line is " + kind(element)
                                + ", not a JSON object", "write one JSON object per line, e.g. {\"text\": \"...\"}")));
                    }
                } catch (JsonParseException | IOException e) {
                    sink.accept(new Row(null, location, new InvalidRow("not valid JSON: " + gsonReason(e),
                            "each line must be one complete JSON object; check quotes, commas and escaped newlines")));
                }
            }
        }
    }

    /** Counts what the JSON reader takes, per array element: one element over the row bound stops the read. */
    private static final class ElementBound extends java.io.FilterReader {
        private long taken;

        ElementBound(Reader in) {
            super(in);
        }

        void nextElement() {
            taken = 0;
        }

        @Override
        public int read(char[] buffer, int offset, int length) throws IOException {
            int n = super.read(buffer, offset, length);
            taken += Math.max(0, n);
            // the JSON reader reads ahead a buffer's worth, so an element's own bound is checked with that slack
            if (taken > BoundedFiles.LINE_BYTES + (1 << 16)) {
                throw new ElementTooLarge();
            }
            return n;
        }
    }

    private static final class ElementTooLarge extends IOException {
        ElementTooLarge() {
            super("an element over " + BoundedFiles.size(BoundedFiles.LINE_BYTES));
        }
    }

    private static void readArray(Path file, ElementBound source, Consumer<Row> sink) throws IOException {
        String name = file.toString();
        JsonReader reader = new JsonReader(source);
        reader.setStrictness(Strictness.STRICT);
        List<Row> rows = new ArrayList<>();
        try {
            reader.beginArray();
            int index = 0;
            while (reader.hasNext()) {
                String location = name + ":" + line(reader) + " (element " + index + ")";
                source.nextElement();
                JsonElement element = ELEMENT.read(reader);
                rows.add(element.isJsonObject()
                        ? new Row(element.getAsJsonObject(), location, null)
                        : new Row(null, location, new InvalidRow("the array element is " + kind(element) + ", not a JSON object",
                                "make every element of the array an object with the dataset's fields")));
                index++;
            }
            reader.endArray();
            if (reader.peek() != JsonToken.END_DOCUMENT) {
                throw new MalformedJsonException("text after the closing ]");
            }
        } catch (ElementTooLarge e) {
            throw new UserError(name + ":" + line(reader), "element " + rows.size() + " of the JSON array is over "
                    + BoundedFiles.size(BoundedFiles.LINE_BYTES) + " (the limit for one row)",
                    "split the data into rows under " + BoundedFiles.size(BoundedFiles.LINE_BYTES) + ", as JSON Lines");
        } catch (IOException | JsonParseException | IllegalStateException e) {
            // A JSON array cannot be resynchronised after a syntax error, so the whole file is refused even when
            // broken rows may be skipped.
            throw new UserError(name + ":" + line(reader), "the JSON array is not valid JSON: " + gsonReason(e),
                    "fix the file, or convert it to JSON Lines so one broken row does not hide the rest");
        }
        rows.forEach(sink);
    }

    /** Gson's JsonParser is lenient (it reads {@code {"a": oops}} as a string); datasets must be real JSON. */
    private static JsonElement parseLine(String line) throws IOException {
        JsonReader reader = new JsonReader(new StringReader(line));
        reader.setStrictness(Strictness.STRICT);
        JsonElement element = ELEMENT.read(reader);
        if (reader.peek() != JsonToken.END_DOCUMENT) {
            throw new MalformedJsonException("text after the JSON value");
        }
        return element;
    }

    private static String kind(JsonElement element) {
        if (element.isJsonArray()) {
            return "an array";
        }
        if (element.isJsonNull()) {
            return "null";
        }
        return element.getAsJsonPrimitive().isString() ? "a string" : element.getAsJsonPrimitive().isNumber() ? "a number" : "a boolean";
    }

    private static String line(JsonReader reader) {
        Matcher matcher = GSON_LINE.matcher(reader.toString());
        return matcher.find() ? matcher.group(1) : "?";
    }

    /** Gson's message without its links and lenient-parsing advice. */
    private static String gsonReason(Exception e) {
        // a JSON Lines row is parsed on its own, so its "line 1" is the row's file:line, said already
        return dev.finetune.recipes.JsonProblems.reason(e).replace(" at line 1 column ", " at column ");
    }

}
