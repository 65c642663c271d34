package dev.finetune.trainers.data;

import com.google.gson.JsonObject;
import dev.finetune.recipes.BoundedFiles;
import dev.finetune.recipes.UserError;
import java.io.FilterReader;
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
        long recordStart = 1;
        try (RecordBound bounded = new RecordBound(new InputStreamReader(Rows.open(file), StandardCharsets.UTF_8));
                CSVParser parser = format.parse(bounded)) {
            List<String> header = parser.getHeaderNames();
            bounded.nextRecord();
            recordStart = parser.getCurrentLineNumber() + 1;
            for (CSVRecord record : parser) {
                String location = file + ":" + parser.getCurrentLineNumber();
                if (record.size() != header.size()) {
                    sink.accept(new JsonRows.Row(null, location, new InvalidRow("the record has " + record.size()
                            + " fields, the header " + header.size(), "quote cells holding the separator or line breaks")));
                } else {
                    JsonObject row = new JsonObject();
                    for (int i = 0; i < header.size(); i++) {
                        row.addProperty(header.get(i), record.get(i));
                    }
                    sink.accept(new JsonRows.Row(row, location, null));
                }
                bounded.nextRecord();
                recordStart = parser.getCurrentLineNumber() + 1;
            }
        } catch (IOException | RuntimeException e) {
            if (e instanceof UserError u) {
                throw u;
            }
            for (Throwable t = e; t != null; t = t.getCause()) {
                if (t instanceof RecordTooLarge) {
                    String limit = BoundedFiles.size(BoundedFiles.LINE_BYTES);
                    throw new UserError(file + ":" + recordStart, "the CSV record starting at line " + recordStart
                            + " is over " + limit + " (the limit for one row; a quote that is never closed, or a file "
                            + "without line breaks?)", "close the quote, or split the data into records under " + limit);
                }
            }
            throw Rows.unreadable(file, "CSV", e);
        }
    }

    /**
     * Counts what the CSV parser takes, per record: a quoted cell never closed (or a line that never ends) would
     * otherwise be gathered into memory to the end of the file. Counted in chars, which are bytes for ASCII text.
     */
    private static final class RecordBound extends FilterReader {
        private long taken;

        RecordBound(Reader in) {
            super(in);
        }

        void nextRecord() {
            taken = 0;
        }

        @Override
        public int read() throws IOException {
            int c = super.read();
            count(c < 0 ? 0 : 1);
            return c;
        }

        @Override
        public int read(char[] buffer, int offset, int length) throws IOException {
            int n = super.read(buffer, offset, length);
            count(Math.max(0, n));
            return n;
        }

        private void count(int n) throws RecordTooLarge {
            taken += n;
            // the parser reads ahead a buffer's worth, so a record's own bound is checked with that slack
            if (taken > BoundedFiles.LINE_BYTES + (1 << 16)) {
                throw new RecordTooLarge();
            }
        }
    }

    private static final class RecordTooLarge extends IOException {
        RecordTooLarge() {
            super("a record over " + BoundedFiles.size(BoundedFiles.LINE_BYTES));
        }
    }
}
