package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.function.Consumer;

/** {@code ds_type: text}: one row per line, in a {@code text} field, as datasets' text builder reads a file. */
final class TextRows {
    private TextRows() {}

    static void read(Path file, Consumer<JsonRows.Row> sink) {
        try (BufferedReader reader = new BufferedReader(new InputStreamReader(Rows.open(file), StandardCharsets.UTF_8))) {
            String line;
            int number = 0;
            while ((line = reader.readLine()) != null) {
                number++;
                JsonObject row = new JsonObject();
                row.addProperty("text", line);
                sink.accept(new JsonRows.Row(row, file + ":" + number, null));
            }
        } catch (IOException e) {
            throw Rows.unreadable(file, "text", e);
        }
    }
}
