package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * "Valid" means "it runs": every Axolotl example recipe that {@code validate} accepts gets the embedded model and
 * small made-up data in the shape its datasets name (and this machine as its hardware), is validated again as such,
 * and trains two steps to exit 0. A recipe that validates and is then refused when the run starts fails the test:
 * whatever the trainer refuses at start, {@code validate} must have said. What the swap itself makes impossible here
 * (an 8-bit optimizer on a CPU) {@code validate} refuses, and the test reports it without failing; so is a recipe
 * whose hub model {@code validate} could not read (neither the cache nor the built-in table has it, and it says the
 * run checks that architecture) with LoRA targets that only that architecture has, counted apart.
 *
 * <p>Recipes that are identical after the swap run once. Skipped, with the reason, where the corpus is absent
 * ({@link ValidateCorpusTest#corpus}), except under CI ({@code CI=true}), where its absence is a failure.
 */
class AxolotlCorpusRunTest {
    /** The embedded model's context: a recipe's longer sequences are cut to it, with the model swapped in. */
    static final int STORIES_CONTEXT = 512;
    static final Path STORIES = MainProcessTest.repoRoot().resolve("configs/models/stories260K");
    /** What validate says when only the hub has the model's config.json ({@code RunChecks.leftToTheRun}). */
    static final String ARCHITECTURE_LEFT_TO_THE_RUN = "its architecture (config.json, which neither the cache nor "
            + "the built-in table holds)";

    @Test
    @Timeout(900)
    void everyRecipeValidateAcceptsTrainsTwoSteps(@TempDir Path work) throws IOException {
        Path corpus = ValidateCorpusTest.corpus();
        List<Path> files = ValidateCorpusTest.yamlFiles(corpus).stream().map(Path::of).toList();
        int accepted = 0;
        Set<String> swappedTexts = new LinkedHashSet<>();
        Map<String, String> refusedHere = new LinkedHashMap<>();
        Map<String, String> targetsOfItsOwnModel = new LinkedHashMap<>();
        List<String> ran = new ArrayList<>();
        List<String> failed = new ArrayList<>();
        int index = 0;
        for (Path file : files) {
            InProcess.Run original = InProcess.finetune("validate", file.toString());
            if (original.exit() != 0) {
                continue;
            }
            accepted++;
            String name = corpus.relativize(file).toString();
            Path dir = Files.createDirectories(work.resolve("r" + index++));
            String text = CorpusSwap.swapped(file, dir, STORIES, STORIES_CONTEXT);
            if (!swappedTexts.add(text.replace(dir.toString(), "DIR"))) {
                continue;
            }
            Path recipe = dir.resolve("recipe.yaml");
            Files.writeString(recipe, text);
            InProcess.Run check = InProcess.finetune("validate", recipe.toString());
            if (check.exit() != 0) {
                String why = check.err().lines().filter(l -> l.startsWith("error: ")).findFirst().orElse(check.err());
                // a hub model validate knows nothing of: LoRA targets some family has (or regexes) are checked by
                // the run once it has the config.json; the stand-in's modules are the Llama's, so the swap cannot
                // run others, and says so apart from what this machine refuses
                boolean ownModules = original.out().contains(ARCHITECTURE_LEFT_TO_THE_RUN)
                        && AxolotlFamiliesRunTest.refusedKeys(recipe).equals(Set.of("lora_target_modules"));
                (ownModules ? targetsOfItsOwnModel : refusedHere).put(name, why);
                continue;
            }
            // the fsdp worker's Python is the machine's to provide (validate says so): here, the test venv's
            InProcess.Run run = check.out().contains(" worker (")
                    ? InProcess.finetune(recipe.toString(), "--python", PythonStack.python().toString())
                    : InProcess.finetune(recipe.toString());
            if (run.exit() == 0) {
                ran.add(name);
            } else {
                failed.add(name + ": exit " + run.exit() + ": " + last(run.err()));
            }
        }
        System.out.printf("axolotl corpus: %d recipes, %d valid; %d distinct after the swap: %d trained 2 steps, "
                + "%d refused by validate on this machine, %d not runnable on the stand-in (LoRA targets of their own "
                + "architecture, which validate left to the run), %d failed at run start%n", files.size(), accepted,
                swappedTexts.size(), ran.size(), refusedHere.size(), targetsOfItsOwnModel.size(), failed.size());
        refusedHere.forEach((k, v) -> System.out.println("  refused here " + k + ": " + v));
        targetsOfItsOwnModel.forEach((k, v) -> System.out.println("  targets of its own architecture " + k + ": " + v));
        failed.forEach(f -> System.out.println("  FAILED " + f));
        assertTrue(failed.isEmpty(), "recipes validate accepted and the run refused:\n" + String.join("\n", failed));
        assertTrue(ran.size() > 0, "no recipe trained");
    }

    /** A failed run's last three lines, where its reason is. */
    static String last(String text) {
        List<String> lines = text.lines().filter(l -> !l.isBlank()).toList();
        return lines.isEmpty() ? "" : String.join(" | ", lines.subList(Math.max(0, lines.size() - 3), lines.size()));
    }
}
