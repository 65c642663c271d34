package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.trainers.bench.DataReadBench;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * #23's two measurements are taken by hand on a quiet machine (docs/hub-and-data.md, "Measuring"); this runs both
 * harnesses, exactly as documented but on tiny inputs, so that neither breaks silently between those runs (a harness
 * is compiled by the build, but what it calls can move under it). No figure is judged: only that each prints one.
 */
class BenchHarnessTest {
    private static final Pattern RATE = Pattern.compile("median\\s+([\\d,.]+) (rows|MB)/s");

    @Test
    void dataReadBenchWritesItsRowsAndPrintsParquetAndJsonRates(@TempDir Path dir) throws Exception {
        String home = System.getProperty("finetune.home");
        System.setProperty("finetune.home", MainProcessTest.repoRoot().toString());
        String out;
        try {
            out = printed(() -> DataReadBench.main(new String[] {dir.resolve("rows").toString(), "1", "300"}));
        } finally {
            if (home == null) {
                System.clearProperty("finetune.home");
            } else {
                System.setProperty("finetune.home", home);
            }
        }
        for (String line : new String[] {"parquet  into rows", "json     into rows", "parquet  into examples",
                "json     into examples"}) {
            assertRate(out, line);
        }
    }

    @Test
    void hubDownloadBenchPrintsFinetuneAndHuggingFaceHubRates() throws Exception {
        String out = printed(() -> HubDownloadBench.main(new String[] {"2", "1"}));
        assertRate(out, "finetune        median");
        assertRate(out, "huggingface_hub median");
    }

    private static void assertRate(String out, String label) {
        int at = out.indexOf(label);
        assertTrue(at >= 0, "no line '" + label + "' in:\n" + out);
        Matcher m = RATE.matcher(out.substring(at, out.indexOf('\n', at)));
        assertTrue(m.find() && Double.parseDouble(m.group(1).replace(",", "")) > 0, out);
    }

    @FunctionalInterface
    private interface Body {
        void run() throws Exception;
    }

    private static String printed(Body body) throws Exception {
        PrintStream original = System.out;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        System.setOut(new PrintStream(bytes, true, StandardCharsets.UTF_8));
        try {
            body.run();
        } finally {
            System.setOut(original);
        }
        String out = bytes.toString(StandardCharsets.UTF_8);
        original.print(out);
        return out;
    }
}
