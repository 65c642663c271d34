package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** Every file in malformed/ fails with a located one-line error and a hint, as EXPECTED.tsv says. */
class MalformedRecipesTest {

    static final Path DIR = Path.of("src/test/resources/malformed");

    record Expectation(String file, String where, String message) {}

    static List<Expectation> expectations() throws IOException {
        List<Expectation> out = new ArrayList<>();
        for (String line : Files.readAllLines(DIR.resolve("EXPECTED.tsv"))) {
            if (!line.startsWith("#") && !line.isBlank()) {
                String[] f = line.split("\t", -1);
                out.add(new Expectation(f[0], f[1], f[2]));
            }
        }
        return out;
    }

    static List<String> errorLines(Path file) {
        UserError e = assertThrows(UserError.class, () -> ValidatedRecipe.load(file, List.of()), file + " validated");
        List<String> lines = new ArrayList<>();
        if (e instanceof InvalidRecipe invalid) {
            invalid.errors().forEach(f -> lines.add(f.oneLine()));
        } else {
            lines.add(e.oneLine());
        }
        return lines;
    }

    @Test
    void theCorpusHasAtLeastFortyRecipesAndEveryFileIsListed() throws IOException {
        List<Expectation> all = expectations();
        assertTrue(all.size() >= 40, "only " + all.size() + " malformed recipes");
        try (Stream<Path> files = Files.list(DIR)) {
            List<String> yamls = files.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".yaml"))
                    .filter(n -> !n.equals("cyclic-base-b.yaml")).toList();
            for (String y : yamls) {
                assertTrue(all.stream().anyMatch(x -> x.file().equals(y)), y + " is not in EXPECTED.tsv");
            }
        }
    }

    @TestFactory
    Stream<DynamicTest> eachFailsWithALocatedOneLineErrorAndHint() throws IOException {
        return expectations().stream().map(x -> DynamicTest.dynamicTest(x.file(), () -> {
            Path file = DIR.resolve(x.file());
            List<String> lines = errorLines(file);
            String prefix = file + (x.where().isEmpty() ? ": " : ":" + x.where() + ": ");
            boolean found = lines.stream().anyMatch(l -> l.startsWith(prefix) && l.contains(x.message()));
            assertTrue(found, "expected an error starting '" + prefix + "' containing '" + x.message() + "', got " + lines);
            for (String l : lines) {
                assertFalse(l.contains("\n"), "multi-line error: " + l);
                assertTrue(l.contains("(hint: "), "no hint: " + l);
            }
        }));
    }
}
