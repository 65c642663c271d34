package dev.finetune.cli.reliability;

import static dev.finetune.cli.reliability.Case.Kind.BOUNDS;
import static dev.finetune.cli.reliability.Fixtures.recipe;
import static dev.finetune.cli.reliability.Fixtures.sft;
import static dev.finetune.cli.reliability.Fixtures.with;
import static org.junit.jupiter.api.Assertions.assertFalse;

import dev.finetune.cli.reliability.HostileDataFiles.ArrowLie;
import dev.finetune.cli.reliability.HostileDataFiles.ParquetLie;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * #26's bound on every file read from a dataset, for the formats #23 added (text, CSV, Parquet, Arrow) as JSON Lines
 * has it: a row over 64 MiB, a line or quoted cell that never ends, a footer, page or message header that claims
 * more than the file holds. Each is one line naming the file and the row or byte, exit 2, in bounded memory.
 * The unlied files of the same writer read back (so each lie is the only thing wrong).
 */
final class DataFileCases {
    private static final List<String> STORIES = List.of("Once upon a time there was a cat.",
            "The dog ran to the park and played.", "Lily liked her red ball.", "Tom saw a big tree.");

    private DataFileCases() {}

    static List<Case> all() {
        List<Case> all = new ArrayList<>();
        all.add(Case.refused("text dataset of 70 MiB without a line break (preprocess)", BOUNDS,
                "big.txt:1: line 1 is over 64 MiB", dir -> {
                    try (OutputStream out = Files.newOutputStream(dir.resolve("big.txt"))) {
                        megabytes(out, 70);
                    }
                    return preprocess(dir, "big.txt");
                }));
        all.add(Case.refused("CSV with a quote never closed over 70 MiB (preprocess)", BOUNDS,
                "big.csv:2: the CSV record starting at line 2 is over 64 MiB", dir -> {
                    try (OutputStream out = Files.newOutputStream(dir.resolve("big.csv"))) {
                        out.write("text\n\"".getBytes(StandardCharsets.UTF_8));
                        megabytes(out, 70);
                    }
                    return preprocess(dir, "big.csv");
                }));
        all.add(Case.refused("CSV header line of 70 MiB (preprocess)", BOUNDS, "big.csv:1:", dir -> {
            try (OutputStream out = Files.newOutputStream(dir.resolve("big.csv"))) {
                megabytes(out, 70);
            }
            return preprocess(dir, "big.csv");
        }));
        all.add(Case.works("hand-written Parquet file without a lie reads", BOUNDS, "preprocess:", dir -> {
            HostileDataFiles.parquet(dir.resolve("rows.parquet"), STORIES, ParquetLie.NONE);
            return preprocess(dir, "rows.parquet").writing(dir.resolve("work/out"));
        }));
        for (ParquetLie lie : List.of(ParquetLie.FOOTER_LENGTH, ParquetLie.CHUNK_SIZE, ParquetLie.PAGE_COMPRESSED,
                ParquetLie.PAGE_UNCOMPRESSED)) {
            String expect = switch (lie) {
                case FOOTER_LENGTH -> "the Parquet footer claims 2147483646 bytes, more than the file's";
                case CHUNK_SIZE -> "column 'text' of row group 0 claims bytes 4 to 1099511627780, outside the file's";
                case PAGE_COMPRESSED -> "the page at byte 4 of column 'text' of row group 0 claims 2147483647 bytes, "
                        + "more than its column chunk holds";
                default -> "claims 2147483647 bytes uncompressed, over the 256 MiB a page holds";
            };
            all.add(Case.refused("Parquet " + lie.name().toLowerCase().replace('_', ' ') + " lies (preprocess)",
                    BOUNDS, expect, dir -> {
                        HostileDataFiles.parquet(dir.resolve("rows.parquet"), STORIES, lie);
                        return preprocess(dir, "rows.parquet");
                    }));
        }
        all.add(Case.refused("Parquet row of 70 MiB (preprocess)", BOUNDS, "rows.parquet row 1: row 1 is over 64 MiB",
                dir -> {
                    HostileDataFiles.parquet(dir.resolve("rows.parquet"), List.of("short", "a".repeat(70 << 20)),
                            ParquetLie.NONE);
                    return preprocess(dir, "rows.parquet");
                }));
        all.add(Case.works("hand-written Arrow stream without a lie reads", BOUNDS, "preprocess:", dir -> {
            HostileDataFiles.arrow(dir.resolve("rows.arrow"), STORIES, ArrowLie.NONE);
            return preprocess(dir, "rows.arrow").writing(dir.resolve("work/out"));
        }));
        for (ArrowLie lie : List.of(ArrowLie.HEADER_LENGTH, ArrowLie.BODY_LENGTH, ArrowLie.VALUE_OFFSET,
                ArrowLie.ROW_COUNT)) {
            String expect = switch (lie) {
                case HEADER_LENGTH -> "claims a header of 2147483647 bytes, over the 64 MiB a header holds";
                case BODY_LENGTH -> "claims a body of 1099511627776 bytes, more than the";
                case VALUE_OFFSET -> "value 3 of column 'text' lies at bytes";
                default -> "it claims 2147483647 rows in a body of";
            };
            all.add(Case.refused("Arrow " + lie.name().toLowerCase().replace('_', ' ') + " lies (preprocess)",
                    BOUNDS, expect, dir -> {
                        HostileDataFiles.arrow(dir.resolve("rows.arrow"), STORIES, lie);
                        return preprocess(dir, "rows.arrow");
                    }));
        }
        all.add(Case.refused("Arrow row of 70 MiB (preprocess)", BOUNDS, "rows.arrow row 1: row 1 is over 64 MiB",
                dir -> {
                    HostileDataFiles.arrow(dir.resolve("rows.arrow"), List.of("short", "a".repeat(70 << 20)),
                            ArrowLie.NONE);
                    return preprocess(dir, "rows.arrow");
                }));
        all.add(Case.refused("a FIFO named .parquet as the dataset (preprocess)", BOUNDS, "not a regular file", dir -> {
            Process mkfifo = new ProcessBuilder("mkfifo", dir.resolve("rows.parquet").toString()).start();
            if (mkfifo.waitFor() != 0) {
                throw new IllegalStateException("mkfifo failed");
            }
            return preprocess(dir, "rows.parquet");
        }).then((dir, o) -> assertFalse(o.err().contains("Exception"), o.err())));
        // #26 applied to #23's hub client: what an HF_ENDPOINT answers is read within a bound, and anything but
        // the hub's JSON is one line (a captive portal's page gave a 33-line Gson trace, exit 1; an endless answer
        // took 6 GB and was reported as "cannot reach the hub: Java heap space")
        for (String answer : List.of("html", "endless")) {
            all.add(Case.refused("HF_ENDPOINT answering " + (answer.equals("html") ? "an HTML page" : "without end")
                    + " (download)", BOUNDS, answer.equals("html") ? "sent an answer that is not JSON"
                            : "sent an answer over 16 MiB", dir -> {
                        com.sun.net.httpserver.HttpServer server = fakeEndpoint(answer);
                        return Case.Invocation.of("download", "org/model")
                                .withEnv("HF_HOME", dir.resolve("hf").toString())
                                .withEnv("HF_HUB_CACHE", dir.resolve("hf/hub").toString())
                                .withEnv("HF_ENDPOINT", "http://127.0.0.1:" + server.getAddress().getPort())
                                .withEnv("HF_HUB_OFFLINE", "0").withEnv("TRANSFORMERS_OFFLINE", "0")
                                .writing(dir.resolve("hf")).finallyDo(() -> server.stop(0));
                    }).then((dir, o) -> assertFalse(o.err().contains("Exception"), o.err())));
        }
        return all;
    }

    /** A server on 127.0.0.1 that is no hub: an HTML page for every request, or a JSON text that never ends. */
    private static com.sun.net.httpserver.HttpServer fakeEndpoint(String answer) throws java.io.IOException {
        var server = com.sun.net.httpserver.HttpServer.create(new java.net.InetSocketAddress("127.0.0.1", 0), 0);
        server.setExecutor(java.util.concurrent.Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "fake-endpoint");
            t.setDaemon(true);
            return t;
        }));
        server.createContext("/", exchange -> {
            try (exchange; OutputStream out = exchange.getResponseBody()) {
                if (answer.equals("html")) {
                    byte[] page = "<html><body>Sign in to the network</body></html>".getBytes(StandardCharsets.UTF_8);
                    exchange.getResponseHeaders().add("Content-Type", "text/html");
                    exchange.sendResponseHeaders(200, page.length);
                    out.write(page);
                } else {
                    exchange.getResponseHeaders().add("Content-Type", "application/json");
                    exchange.sendResponseHeaders(200, 0);
                    out.write("{\"sha\": \"".getBytes(StandardCharsets.UTF_8));
                    byte[] block = "a".repeat(1 << 20).getBytes(StandardCharsets.UTF_8);
                    for (int i = 0; i < 100_000; i++) { // until the client hangs up
                        out.write(block);
                    }
                }
            } catch (java.io.IOException e) {
                // the client stopped reading: what the case expects of the endless answer
            }
        });
        server.start();
        return server;
    }

    /** {@code preprocess} of the quickstart recipe reading {@code file} (a completion dataset: its {@code text}). */
    private static Case.Invocation preprocess(Path dir, String file) throws Exception {
        Path recipe = recipe(dir, with(sft(), "datasets", "\n  - path: " + file + "\n    type: completion",
                "val_set_size", "0"));
        return Case.Invocation.of("preprocess", recipe.toString());
    }

    private static void megabytes(OutputStream out, int megabytes) throws Exception {
        byte[] block = "a".repeat(1 << 20).getBytes(StandardCharsets.UTF_8);
        for (int i = 0; i < megabytes; i++) {
            out.write(block);
        }
    }
}
