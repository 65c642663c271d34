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
        try (BufferedReader reader = new BufferedReader(new java.io.InputStreamReader(Rows.open(file), StandardCharsets.UTF_8), 1 << 16)) {
            reader.mark(1 << 16);
            int first;
            do {
                first = reader.read();
            } while (first == 0xFEFF || (first >= 0 && Character.isWhitespace(first)));
            reader.reset();
            if (first == '[') {
                readArray(file, reader, sink);
            } else {
                readLines(file, reader, sink);
            }
        } catch (IOException e) {
            throw new UserError(file.toString(), "cannot read the dataset: " + e.getMessage(), "check the file");
        }
    }

    private static void readLines(Path file, BufferedReader reader, Consumer<Row> sink) throws IOException {
        String name = file.toString();
        String line;
        int number = 0;
        while ((line = reader.readLine()) != null) {
            number++;
            if (number == 1 && line.startsWith("\uFEFF")) {
                line = line.substring(1);
            }
            if (line.isBlank()) {
                continue;
            }
            String location = name + ":" + number;
            try {
                JsonElement element = parseLine(line);
                if (element.isJsonObject()) {
                    sink.accept(new Row(element.getAsJsonObject(), location, null));
                } else {
                    sink.accept(new Row(null, location, new InvalidRow("the line is " + kind(element) + ", not a JSON object",
                            "write one JSON object per line, e.g. {\"text\": \"...\"}")));
                }
            } catch (JsonParseException | IOException e) {
                sink.accept(new Row(null, location, new InvalidRow("not valid JSON: " + gsonReason(e),
                        "each line must be one complete JSON object; check quotes, commas and escaped newlines")));
            }
        }
    }

    private static void readArray(Path file, Reader source, Consumer<Row> sink) throws IOException {
        String name = file.toString();
        JsonReader reader = new JsonReader(source);
        reader.setStrictness(Strictness.STRICT);
        List<Row> rows = new ArrayList<>();
        try {
            reader.beginArray();
            int index = 0;
            while (reader.hasNext()) {
                String location = name + ":" + line(reader) + " (element " + index + ")";
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

    /** Gson's messages end with a location and a troubleshooting URL; keep the reason only. */
    private static String gsonReason(Exception e) {
        Throwable cause = e.getCause() != null && e.getCause().getMessage() != null ? e.getCause() : e;
        String message = String.valueOf(cause.getMessage());
        int at = message.indexOf(" at line ");
        if (at < 0) {
            at = message.indexOf(" at path ");
        }
        message = at > 0 ? message.substring(0, at) : message;
        int see = message.indexOf("\nSee ");
        return see > 0 ? message.substring(0, see) : message;
    }
}
