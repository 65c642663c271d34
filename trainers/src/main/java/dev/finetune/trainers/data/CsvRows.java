package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.function.Consumer;
import org.apache.commons.csv.CSVFormat;
import org.apache.commons.csv.CSVParser;
import org.apache.commons.csv.CSVRecord;

/**
 * {@code ds_type: csv}: a header line names the fields, each further record is a row (RFC 4180 quoting; tab-separated
 * for {@code .tsv}). Cells are text: a number in a CSV cell stays the text it was written as.
 */
final class CsvRows {
    private CsvRows() {}

    static void read(Path file, Consumer<JsonRows.Row> sink) {
        String name = file.getFileName().toString();
        CSVFormat format = (name.endsWith(".tsv") || name.endsWith(".tsv.gz") ? CSVFormat.TDF : CSVFormat.RFC4180)
                .builder().setHeader().setSkipHeaderRecord(true).get();
        try (Reader reader = new InputStreamReader(Rows.open(file), StandardCharsets.UTF_8);
                CSVParser parser = format.parse(reader)) {
            List<String> header = parser.getHeaderNames();
            for (CSVRecord record : parser) {
                String location = file + ":" + parser.getCurrentLineNumber();
                if (record.size() != header.size()) {
                    sink.accept(new JsonRows.Row(null, location, new InvalidRow("the record has " + record.size()
                            + " fields, the header " + header.size(), "quote cells holding the separator or line breaks")));
                    continue;
                }
                JsonObject row = new JsonObject();
                for (int i = 0; i < header.size(); i++) {
                    row.addProperty(header.get(i), record.get(i));
                }
                sink.accept(new JsonRows.Row(row, location, null));
            }
        } catch (IOException | RuntimeException e) {
            throw Rows.unreadable(file, "CSV", e);
        }
    }
}
