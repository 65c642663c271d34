package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

/**
 * {@code finetune validate} over a recipe repository: folders, fragments, the summary, every report format
 * (JSON against its published schema, JUnit through a real XML parser, GitHub's workflow-command syntax), the
 * memory verdict of {@code --plan}, and {@code --flatten}'s stable form.
 */
class ValidateManyTest {

    /**
     * A team's recipe folder: two recipes sharing a fragment through {@code base:}, one with a typo, a nested
     * {@code .yml}, a CI workflow under {@code .github/} that is no recipe, and a data file.
     */
    static Path repository(Path dir) throws IOException {
        Path recipes = Files.createDirectories(dir.resolve("recipes"));
        Files.writeString(recipes.resolve("stories.jsonl"), "{\"text\": \"Once upon a time\"}\n".repeat(8));
        Files.writeString(recipes.resolve("common.yaml"), """
                # Shared settings of our story recipes.
                # finetune: fragment
                base_model: %s
                datasets:
                  - path: stories.jsonl
                    type: completion
                sequence_len: 64
                gradient_accumulation_steps: 1
                hardware: cpu
                """.formatted(MainProcessTest.repoRoot().resolve("configs/models/stories260K")));
        Files.writeString(recipes.resolve("lora.yaml"), """
                # LoRA on the story model.
                base: common.yaml
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_target_linear: true
                micro_batch_size: 2
                learning_rate: 1e-3
                """);
        Files.createDirectories(recipes.resolve("full"));
        Files.writeString(recipes.resolve("full/full.yml"), """
                base: ../common.yaml
                micro_batch_size: 4
                learning_rate: 1e-4
                """);
        Files.writeString(recipes.resolve("typo.yaml"), """
                base: common.yaml
                micro_batch_size: 2
                lerning_rate: 1e-3
                """);
        Files.createDirectories(recipes.resolve(".github/workflows"));
        Files.writeString(recipes.resolve(".github/workflows/ci.yml"), "on: push\njobs: {}\n");
        return recipes;
    }

    @Test
    void aFolderIsSearchedRecursivelySkippingFragmentsAndHiddenFolders(@TempDir Path dir) throws IOException {
        Path recipes = repository(dir);
        InProcess.Run run = InProcess.finetune("validate", recipes.toString());
        assertEquals(2, run.exit(), run.out() + run.err());
        // each valid recipe names the trainer that would run it (here this machine's CPU, no hardware: declared)
        assertTrue(run.out().contains("valid: " + recipes.resolve("lora.yaml")
                + " (single-device trainer (this JVM) on CPU, 1 rank)"), run.out());
        assertTrue(run.out().contains("valid: " + recipes.resolve("full/full.yml")), run.out());
        assertTrue(run.out().contains("invalid: " + recipes.resolve("typo.yaml") + " (2 errors)"), run.out());
        assertTrue(run.out().contains("fragment: " + recipes.resolve("common.yaml")), run.out());
        assertFalse(run.out().contains("ci.yml") || run.err().contains("ci.yml"), run.out() + run.err());
        assertTrue(run.out().strip().endsWith("3 recipes: 2 valid, 1 invalid, 0 warnings, 1 fragment skipped"), run.out());
        assertTrue(run.err().contains("error: " + recipes.resolve("typo.yaml") + ":3:1: unknown key 'lerning_rate'"), run.err());
        assertTrue(run.err().contains("did you mean 'learning_rate'?"), run.err());
        assertTrue(run.err().contains("error: " + recipes.resolve("typo.yaml") + ":1:1: learning_rate is required"), run.err());

        // Files and folders mix; a file reached twice is checked once; only valid ones exit 0.
        InProcess.Run valid = InProcess.finetune("validate", recipes.resolve("lora.yaml").toString(),
                recipes.resolve("full").toString(), recipes.resolve("lora.yaml").toString());
        assertEquals(0, valid.exit(), valid.out() + valid.err());
        assertTrue(valid.out().strip().endsWith("2 recipes: 2 valid, 0 invalid, 0 warnings"), valid.out());
    }

    @Test
    void overridesApplyToEveryRecipeAndAMissingPathIsBadInput(@TempDir Path dir) throws IOException {
        Path recipes = repository(dir);
        InProcess.Run run = InProcess.finetune("validate", recipes.resolve("lora.yaml").toString(),
                recipes.resolve("full").toString(), "micro_batch_size=0");
        assertEquals(2, run.exit());
        assertEquals(2, run.err().lines().filter(l -> l.contains("micro_batch_size must be at least 1")).count(), run.err());
        InProcess.Run missing = InProcess.finetune("validate", dir.resolve("absent").toString());
        assertEquals(2, missing.exit());
        assertTrue(missing.err().startsWith("error: " + dir.resolve("absent") + ": no such file or folder"), missing.err());
    }

    @Test
    void jsonFollowsItsPublishedSchemaWithOneObjectPerFinding(@TempDir Path dir) throws IOException {
        Path recipes = repository(dir);
        Files.writeString(recipes.resolve("warned.yaml"), """
                base: common.yaml
                micro_batch_size: 2
                learning_rate: 1e-3
                wandb_project: stories
                """);
        InProcess.Run run = InProcess.finetune("validate", recipes.toString(), "--format", "json");
        assertEquals(2, run.exit(), run.err());
        assertEquals("", run.err());
        JsonObject report = JsonParser.parseString(run.out()).getAsJsonObject();
        JsonObject schema;
        try (InputStream in = ValidateCommand.class.getResourceAsStream("validate-report.schema.json")) {
            schema = JsonParser.parseString(new String(in.readAllBytes(), StandardCharsets.UTF_8)).getAsJsonObject();
        }
        List<String> violations = new ArrayList<>();
        SchemaCheck.check(schema, report, "$", violations);
        assertEquals(List.of(), violations);

        JsonArray findings = report.getAsJsonArray("findings");
        assertEquals(3, findings.size(), run.out());
        JsonObject typo = find(findings, "key", "lerning_rate");
        assertEquals(recipes.resolve("typo.yaml").toString(), typo.get("file").getAsString());
        assertEquals(3, typo.get("line").getAsInt());
        assertEquals(1, typo.get("column").getAsInt());
        assertEquals("error", typo.get("severity").getAsString());
        assertTrue(typo.get("hint").getAsString().contains("learning_rate"), typo.toString());
        // A key the recipe lacks is named by the message, not by whatever key happens to start the file.
        JsonObject missing = find(findings, "key", "learning_rate");
        assertEquals("learning_rate is required", missing.get("message").getAsString());
        JsonObject warning = find(findings, "severity", "warning");
        assertEquals("wandb_project", warning.get("key").getAsString());
        assertEquals(recipes.resolve("warned.yaml").toString(), warning.get("recipe").getAsString());

        JsonObject summary = report.getAsJsonObject("summary");
        assertEquals(4, summary.get("files").getAsInt());
        assertEquals(1, summary.get("invalid").getAsInt());
        assertEquals(1, summary.get("fragments").getAsInt());
        Map<String, String> verdicts = new HashMap<>();
        report.getAsJsonArray("recipes").forEach(r -> verdicts.put(r.getAsJsonObject().get("file").getAsString(),
                r.getAsJsonObject().get("verdict").getAsString()));
        assertEquals("fragment", verdicts.get(recipes.resolve("common.yaml").toString()));
        assertEquals("invalid", verdicts.get(recipes.resolve("typo.yaml").toString()));
        assertEquals("valid", verdicts.get(recipes.resolve("warned.yaml").toString()));
    }

    @Test
    void aFindingInABaseFilePointsAtThatFileAndAnOverrideNamesItsKey(@TempDir Path dir) throws IOException {
        Path recipes = repository(dir);
        Files.writeString(recipes.resolve("common.yaml"), Files.readString(recipes.resolve("common.yaml"))
                .replace("sequence_len: 64", "sequence_len: -1"));
        InProcess.Run run = InProcess.finetune("validate", recipes.resolve("lora.yaml").toString(), "lora_r=0",
                "--format", "json");
        JsonArray findings = JsonParser.parseString(run.out()).getAsJsonObject().getAsJsonArray("findings");
        JsonObject base = find(findings, "key", "sequence_len");
        assertEquals(recipes.resolve("common.yaml").toString(), base.get("file").getAsString());
        assertEquals(recipes.resolve("lora.yaml").toString(), base.get("recipe").getAsString());
        assertEquals(7, base.get("line").getAsInt());
        JsonObject override = find(findings, "key", "lora_r");
        assertTrue(override.get("line").isJsonNull(), override.toString());
        assertEquals(recipes.resolve("lora.yaml").toString(), override.get("file").getAsString());
    }

    @Test
    void junitHasATestCasePerRecipeThatAnXmlParserReads(@TempDir Path dir) throws Exception {
        Path recipes = repository(dir);
        InProcess.Run run = InProcess.finetune("validate", recipes.toString(), "--format", "junit");
        assertEquals(2, run.exit(), run.err());
        Document xml = DocumentBuilderFactory.newInstance().newDocumentBuilder()
                .parse(new ByteArrayInputStream(run.out().getBytes(StandardCharsets.UTF_8)));
        Element suites = xml.getDocumentElement();
        assertEquals("testsuites", suites.getTagName());
        assertEquals("4", suites.getAttribute("tests"));
        assertEquals("1", suites.getAttribute("failures"));
        assertEquals("1", suites.getAttribute("skipped"));
        NodeList cases = xml.getElementsByTagName("testcase");
        assertEquals(4, cases.getLength());
        Map<String, Element> byName = new HashMap<>();
        for (int i = 0; i < cases.getLength(); i++) {
            Element c = (Element) cases.item(i);
            byName.put(c.getAttribute("name"), c);
        }
        Element typo = byName.get(recipes.resolve("typo.yaml").toString());
        Element failure = (Element) typo.getElementsByTagName("failure").item(0);
        assertTrue(failure.getAttribute("message").startsWith("2 errors: "), failure.getAttribute("message"));
        assertTrue(failure.getTextContent().contains(":3:1: unknown key 'lerning_rate'"), failure.getTextContent());
        assertEquals(0, byName.get(recipes.resolve("lora.yaml").toString()).getElementsByTagName("failure").getLength());
        assertEquals(1, byName.get(recipes.resolve("common.yaml").toString()).getElementsByTagName("skipped").getLength());
    }

    @Test
    void githubPrintsOneWorkflowCommandPerFinding(@TempDir Path dir) throws IOException {
        Path recipes = repository(dir);
        Files.writeString(recipes.resolve("two-errors.yaml"), """
                base: common.yaml
                micro_batch_size: 0
                learning_rate: 1e-3
                wandb_project: stories
                """);
        InProcess.Run run = InProcess.finetune("validate", recipes.toString(), "--format", "github");
        assertEquals(2, run.exit(), run.err());
        Pattern command = Pattern.compile("::(error|warning) file=[^,:]+(,line=\\d+,col=\\d+)?,title=[^:,]+::.+");
        List<String> commands = run.out().lines().filter(l -> l.startsWith("::")).toList();
        assertTrue(commands.size() >= 3, run.out());
        for (String line : commands) {
            assertTrue(command.matcher(line).matches(), line);
        }
        assertTrue(commands.contains("::error file=" + recipes.resolve("typo.yaml") + ",line=3,col=1,title=finetune validate%3A "
                + "lerning_rate::unknown key 'lerning_rate' (hint: did you mean 'learning_rate'?)"), run.out());
        assertTrue(commands.stream().anyMatch(l -> l.startsWith("::error file=" + recipes.resolve("two-errors.yaml")
                + ",line=2,col=19,title=finetune validate%3A micro_batch_size::")), run.out());
        assertTrue(run.out().strip().endsWith("4 recipes: 2 valid, 2 invalid, 1 warning, 1 fragment skipped"), run.out());
        // GitHub's own escaping: '%', CR and LF in messages; also ':' and ',' in properties.
        assertEquals("50%25 off%0Anext", GithubReport.data("50% off\nnext"));
        assertEquals("a%3Ab%2Cc%0D", GithubReport.property("a:b,c\r"));
    }

    @Test
    void planAddsTheMemoryVerdictOnTheDeclaredOrGivenHardware(@TempDir Path dir) throws IOException {
        Path recipes = repository(dir);
        InProcess.Run declared = InProcess.finetune("validate", recipes.resolve("lora.yaml").toString(), "--plan");
        assertEquals(0, declared.exit(), declared.err());
        assertTrue(declared.out().contains("memory: peak ") && declared.out().contains("(CPU, ") && declared.out().contains(": fits"),
                declared.out());

        Path big = MainProcessTest.repoRoot().resolve("configs/llama-3.1-70b/full-fsdp.yaml");
        InProcess.Run fits = InProcess.finetune("validate", big.toString(), "--plan", "--format", "json");
        assertEquals(0, fits.exit(), fits.out());
        JsonObject memory = JsonParser.parseString(fits.out()).getAsJsonObject().getAsJsonArray("recipes").get(0)
                .getAsJsonObject().getAsJsonObject("memory");
        assertTrue(memory.get("fits").getAsBoolean(), memory.toString());
        assertEquals(80L << 30, memory.get("capacity_bytes").getAsLong());

        InProcess.Run tooSmall = InProcess.finetune("validate", big.toString(), "--plan", "--gpus", "1", "--gpu-memory", "80GiB");
        assertEquals(2, tooSmall.exit(), tooSmall.out());
        assertTrue(tooSmall.err().contains("does not fit 1 GPU × 80.0 GiB: peak "), tooSmall.err());
        assertTrue(tooSmall.err().contains("(hint: for example: "), tooSmall.err());

        Files.writeString(recipes.resolve("common.yaml"), Files.readString(recipes.resolve("common.yaml")).replace("hardware: cpu\n", ""));
        InProcess.Run undeclared = InProcess.finetune("validate", recipes.resolve("lora.yaml").toString(), "--plan");
        assertEquals(0, undeclared.exit(), undeclared.err());
        assertTrue(undeclared.err().contains("warning: " + recipes.resolve("lora.yaml") + ": memory not checked: the recipe declares no hardware"),
                undeclared.err());
        InProcess.Run given = InProcess.finetune("validate", recipes.resolve("lora.yaml").toString(), "--plan", "--gpu-memory", "24GiB");
        assertTrue(given.out().contains("(1 GPU × 24.0 GiB): fits"), given.out() + given.err());
    }

    @Test
    void flattenSortsKeysSoTheOutputDependsOnlyOnTheRecipesMeaning(@TempDir Path dir) throws IOException {
        Path recipes = repository(dir);
        Path reordered = recipes.resolve("reordered.yaml");
        Files.writeString(reordered, """
                learning_rate: 1e-3
                micro_batch_size: 2
                lora_target_linear: true
                lora_alpha: 16
                lora_r: 8
                adapter: lora
                base: common.yaml
                """);
        InProcess.Run a = InProcess.finetune("validate", "--flatten", recipes.resolve("lora.yaml").toString());
        InProcess.Run b = InProcess.finetune("validate", "--flatten", reordered.toString());
        assertEquals(0, a.exit(), a.err());
        assertEquals(a.out(), b.out());
        List<String> topKeys = a.out().lines().filter(l -> !l.startsWith(" ") && !l.startsWith("-") && l.contains(":"))
                .map(l -> l.substring(0, l.indexOf(':'))).toList();
        assertEquals(topKeys.stream().sorted().toList(), topKeys);
        assertTrue(topKeys.containsAll(List.of("adapter", "base_model", "datasets", "hardware", "sequence_len")), topKeys.toString());
        assertFalse(topKeys.contains("base"), a.out());
    }

    private static JsonObject find(JsonArray findings, String field, String value) {
        for (JsonElement e : findings) {
            JsonElement v = e.getAsJsonObject().get(field);
            if (v != null && !v.isJsonNull() && v.getAsString().equals(value)) {
                return e.getAsJsonObject();
            }
        }
        fail("no finding with " + field + " = " + value + " in " + findings);
        return null;
    }

    @Test
    void aWarningSeveralRecipesDrawIsPrintedOnceWithWhere(@TempDir Path dir) throws IOException {
        Path recipes = repository(dir);
        for (String name : List.of("w1.yaml", "w2.yaml", "w3.yaml")) {
            Files.writeString(recipes.resolve(name), Files.readString(recipes.resolve("lora.yaml")) + "attn_implementation: sdpa\n");
        }
        InProcess.Run run = InProcess.finetune("validate", recipes.toString());
        String repeated = "'attn_implementation' is ignored: an attention, kernel or speed choice";
        assertEquals(1, run.err().lines().filter(l -> l.contains(repeated)).count(), run.err());
        assertTrue(run.err().contains("warning: 3 recipes: " + repeated), run.err());
        assertTrue(run.err().contains("; in " + recipes.resolve("w1.yaml")), run.err());
        assertTrue(run.out().contains("3 warnings"), run.out());
    }
}
