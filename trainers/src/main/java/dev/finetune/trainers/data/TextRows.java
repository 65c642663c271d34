package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import dev.finetune.recipes.BoundedFiles;
import java.io.IOException;
import java.nio.file.Path;
import java.util.function.Consumer;

/** {@code ds_type: text}: one row per line, in a {@code text} field, as datasets' text builder reads a file. */
final class TextRows {
    private TextRows() {}

    /**
     * Each line at most {@link BoundedFiles#LINE_BYTES}, as for JSON Lines: a file without line breaks is one clear
     * error, not all memory. A line that is not UTF-8 is a row problem (datasets' builder fails on it too).
     */
    static void read(Path file, Consumer<JsonRows.Row> sink) {
        try (BoundedFiles.Lines lines = new BoundedFiles.Lines(file, Rows.open(file), BoundedFiles.LINE_BYTES,
                "break the text into lines under " + BoundedFiles.size(BoundedFiles.LINE_BYTES) + " (one row each)")) {
            for (BoundedFiles.Lines.Line read; (read = lines.next()) != null; ) {
                String location = file + ":" + read.number();
                if (read.text() == null) {
                    sink.accept(new JsonRows.Row(null, location, new InvalidRow("the line is not valid UTF-8 text",
                            "save the file as UTF-8 (or remove the line)")));
                    continue;
                }
                // a lone \r ends a line too (str.splitlines, and the BufferedReader this reader used before)
                for (String line : read.text().split("\r", -1)) {
                    JsonObject row = new JsonObject();
                    row.addProperty("text", line);
                    sink.accept(new JsonRows.Row(row, location, null));
                }
            }
        } catch (IOException e) {
            throw Rows.unreadable(file, "text", e);
        }
    }
}
