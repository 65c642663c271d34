package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

/**
 * The acceptance check: {@code validate <corpus> --format junit} over every Axolotl example recipe gives,
 * file by file, the verdict that {@code validate <file>} gives alone, and lists every recipe file of the corpus.
 */
class ValidateCorpusTest {

    /**
     * The corpus lives beside the repository ({@code ../shared}), not in it: a user's clone has none, so there the
     * test skips with its reason; CI checks out {@code ../shared}, so under {@code CI=true} a missing corpus fails.
     * {@code -Dfinetune.corpus=DIR} names it where the clone is not beside it (a git worktree elsewhere).
     */
    static Path corpus() {
        String named = System.getProperty("finetune.corpus");
        Path corpus = named != null ? Path.of(named).toAbsolutePath()
                : MainProcessTest.repoRoot().resolveSibling("shared").resolve("compat/axolotl");
        if (!Files.isDirectory(corpus)) {
            String reason = "the Axolotl corpus is not beside the repository: " + corpus;
            if ("true".equals(System.getenv("CI"))) {
                fail(reason + " (CI=true: CI checks out ../shared)");
            }
            assumeTrue(false, reason);
        }
        return corpus;
    }

    @Test
    void folderVerdictsEqualSingleFileVerdicts() throws Exception {
        Path corpus = corpus();
        InProcess.Run whole = InProcess.finetune("validate", corpus.toString(), "--format", "junit");
        NodeList cases = DocumentBuilderFactory.newInstance().newDocumentBuilder()
                .parse(new ByteArrayInputStream(whole.out().getBytes(StandardCharsets.UTF_8)))
                .getElementsByTagName("testcase");
        Map<String, Boolean> folderVerdicts = new LinkedHashMap<>();
        for (int i = 0; i < cases.getLength(); i++) {
            Element c = (Element) cases.item(i);
            folderVerdicts.put(c.getAttribute("name"), c.getElementsByTagName("failure").getLength() == 0);
        }
        List<String> files = yamlFiles(corpus);
        assertEquals(files, List.copyOf(folderVerdicts.keySet()), "the folder run must list every recipe file, in path order");
        int invalid = 0;
        for (String file : files) {
            InProcess.Run alone = InProcess.finetune("validate", file);
            assertTrue(alone.exit() == 0 || alone.exit() == 2, file + ": " + alone.err());
            assertEquals(alone.exit() == 0, folderVerdicts.get(file), file + ": " + alone.err());
            // validate reads through the loader and the validator itself (to name keys); training loads through
            // ValidatedRecipe.load: the two must agree.
            assertEquals(alone.exit() == 0, loads(Path.of(file)), file + ": " + alone.err());
            invalid += alone.exit() == 2 ? 1 : 0;
        }
        assertEquals(invalid > 0 ? 2 : 0, whole.exit());
        System.out.printf("validate corpus: %d recipes, %d invalid; folder and single-file verdicts agree%n", files.size(), invalid);
    }

    private static boolean loads(Path file) {
        try {
            ValidatedRecipe.load(file, List.of());
            return true;
        } catch (UserError e) {
            return false;
        }
    }

    static List<String> yamlFiles(Path corpus) throws IOException {
        try (Stream<Path> walk = Files.walk(corpus)) {
            return walk.filter(Files::isRegularFile)
                    .filter(p -> p.toString().endsWith(".yaml") || p.toString().endsWith(".yml"))
                    .sorted().map(Path::toString).toList();
        }
    }
}
