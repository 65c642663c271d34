package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.model.Family;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.trainers.families.TinyFamilies;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * Issue #25's count, measured: of the Axolotl example recipes whose model is one of finetune's families
 * ({@link CorpusFamilies}), how many {@code validate} accepts as written (on this machine, and on the one GPU the
 * recipes were written for), and whether each accepted one runs on a model of that same family. The hub weights are out of reach here, so each accepted recipe gets a tiny random model
 * of its family made by transformers ({@link TinyFamilies}, FamilyTrainingTest's), made-up rows of its datasets'
 * types, this CPU and 2 steps ({@link CorpusSwap}), and runs on whichever trainer {@code validate} resolves: the
 * in-JVM one or the torch worker. {@link AxolotlCorpusRunTest} proves the same on the Llama stand-in for every
 * recipe; this one puts each family's own machinery (experts, windows, fused projections, norms) under each recipe.
 *
 * <p>A recipe that validates and then fails when its run starts fails the test: that is a finetune bug. A recipe
 * {@code validate} accepts on one GPU and refuses here is refused for what only CUDA with bitsandbytes runs (QLoRA
 * on the torch worker, 8-bit and paged AdamW): the swap replaces exactly what validate refused by its nearest CPU
 * equivalent ({@link CorpusSwap#cpuEquivalents}: LoRA with the same rank and targets, 32-bit AdamW), and the table
 * counts those runs in a column of their own, each with what it replaced, never as QLoRA or 8-bit AdamW that ran.
 * What the swap still cannot make runnable here {@code validate} refuses, and the table reports it. Each
 * worker run costs a Python start, so the test is opt-in: {@code -Dfinetune.corpus.families=true}.
 */
class AxolotlFamiliesRunTest {
    /** The machine the recipes were written for, as an override {@code validate} reads like the recipe's own key. */
    private static final String ONE_GPU = "hardware={gpus: 1}";

    /** What one family's recipes came to. */
    private static final class Row {
        int naming;
        int validHere;
        int validOnGpu;
        int ran;
        final List<String> ranOnCpuEquivalents = new ArrayList<>();
        final List<String> refusedOnSwap = new ArrayList<>();
        final List<String> failed = new ArrayList<>();
    }

    /** How far a swapped recipe got, and the line that says why it stopped there. */
    private enum Stage { RAN, REFUSED_ON_SWAP, FAILED_AT_START }

    /** @param replaced what the swap replaced by its CPU equivalent ({@link CorpusSwap#cpuEquivalents}), if any */
    private record Outcome(Stage stage, String why, List<String> replaced) {}

    @Test
    @Timeout(3600)
    void everyFamilyRecipeValidateAcceptsTrainsTwoStepsOnItsOwnFamily(@TempDir Path work) throws IOException {
        assumeTrue(Boolean.getBoolean("finetune.corpus.families"), "opt-in (one Python start per worker run): "
                + "-Dfinetune.corpus.families=true");
        Path corpus = ValidateCorpusTest.corpus();
        Path python = PythonStack.python();
        Map<Family, Row> rows = new EnumMap<>(Family.class);
        List<String> unplaced = new ArrayList<>();
        List<String> refusedAsWritten = new ArrayList<>();
        List<String> refusedHereOnly = new ArrayList<>();
        Map<String, Outcome> bySwappedText = new HashMap<>();
        int index = 0;
        for (String path : ValidateCorpusTest.yamlFiles(corpus)) {
            Path file = Path.of(path);
            String name = corpus.relativize(file).toString();
            Map<String, Object> recipe = new Yaml(new SafeConstructor(new LoaderOptions())).load(Files.readString(file));
            Optional<CorpusFamilies.Placement> placed = recipe == null ? Optional.empty() : CorpusFamilies.place(recipe);
            if (placed.isEmpty()) {
                unplaced.add(name + " (" + (recipe == null ? "empty" : recipe.get("base_model")
                        + (recipe.get("model_type") == null ? "" : ", " + recipe.get("model_type"))) + ")");
                continue;
            }
            Family family = placed.get().family();
            Row row = rows.computeIfAbsent(family, f -> new Row());
            row.naming++;
            // the recipes are written for GPUs: on this CPU-only machine validate refuses what needs one (QLoRA on
            // the worker, 8-bit optimizers), so the verdict for the machine they were written for is counted too
            InProcess.Run here = InProcess.finetune("validate", path);
            InProcess.Run onGpu = InProcess.finetune("validate", path, ONE_GPU);
            row.validHere += here.exit() == 0 ? 1 : 0;
            row.validOnGpu += onGpu.exit() == 0 ? 1 : 0;
            if (here.exit() != 0 && onGpu.exit() != 0) {
                refusedAsWritten.add(family.modelType() + " " + name + ": " + firstError(onGpu));
                continue;
            }
            if (here.exit() != 0) {
                refusedHereOnly.add(family.modelType() + " " + name + ": " + firstError(here));
            }
            Path dir = Files.createDirectories(work.resolve("r" + index++));
            Path model = tinyModel(family);
            String text = CorpusSwap.swapped(file, dir, model, ModelConfig.read(model).maxPositionEmbeddings());
            // recipes identical after the swap are one run: the second gets the first one's outcome
            String key = text.replace(dir.toString(), "DIR");
            Outcome outcome = bySwappedText.get(key);
            if (outcome == null) {
                outcome = run(dir, text, python, here.exit() != 0);
                bySwappedText.put(key, outcome);
            }
            System.out.printf("%s (%s, by %s): %s %s%s%n", name, family.modelType(), placed.get().how(),
                    outcome.stage(), outcome.why(), outcome.replaced().isEmpty() ? ""
                            : " (on the CPU equivalents: " + String.join(", ", outcome.replaced()) + ")");
            switch (outcome.stage()) {
                case RAN -> {
                    if (outcome.replaced().isEmpty()) {
                        row.ran++;
                    } else {
                        row.ranOnCpuEquivalents.add(name + ": " + String.join(", ", outcome.replaced()));
                    }
                }
                case REFUSED_ON_SWAP -> row.refusedOnSwap.add(name + ": " + outcome.why()
                        + (outcome.replaced().isEmpty() ? "" : " (after " + String.join(", ", outcome.replaced()) + ")"));
                case FAILED_AT_START -> row.failed.add(name + ": " + outcome.why());
            }
        }

        System.out.println("| family | recipes naming it | valid as written: here (CPU) | on 1 GPU | ran 2 steps "
                + "| ran 2 steps with QLoRA→LoRA / 8-bit→32-bit AdamW | refused on the swap | failed at run start |");
        System.out.println("|---|---|---|---|---|---|---|---|");
        int[] total = new int[7];
        List<String> failed = new ArrayList<>();
        for (Family family : Family.values()) {
            Row row = rows.getOrDefault(family, new Row());
            int[] counts = {row.naming, row.validHere, row.validOnGpu, row.ran, row.ranOnCpuEquivalents.size(),
                row.refusedOnSwap.size(), row.failed.size()};
            System.out.printf(Locale.ROOT, "| %s | %d | %d | %d | %d | %d | %d | %d |%n", family.modelType(),
                    counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6]);
            for (int i = 0; i < total.length; i++) {
                total[i] += counts[i];
            }
            failed.addAll(row.failed);
        }
        System.out.printf(Locale.ROOT, "| all | %d | %d | %d | %d | %d | %d | %d |%n", total[0], total[1], total[2],
                total[3], total[4], total[5], total[6]);
        rows.forEach((family, row) -> row.ranOnCpuEquivalents.forEach(r -> System.out.println("  ran on the CPU "
                + "equivalents " + family.modelType() + " " + r)));
        rows.forEach((family, row) -> row.refusedOnSwap.forEach(r -> System.out.println("  refused on the swap "
                + family.modelType() + " " + r)));
        refusedHereOnly.forEach(r -> System.out.println("  refused here, valid on 1 GPU " + r));
        refusedAsWritten.forEach(r -> System.out.println("  refused as written, on 1 GPU too " + r));
        System.out.println("not placed in a supported family (" + unplaced.size() + "):");
        unplaced.forEach(u -> System.out.println("  " + u));
        failed.forEach(f -> System.out.println("  FAILED " + f));
        assertTrue(failed.isEmpty(), "recipes validate accepted and the run refused:\n" + String.join("\n", failed));
        assertTrue(total[3] > 0, "no recipe of a supported family trained");
        assertTrue(total[4] > 0, "no recipe only a GPU accepts trained on its CPU equivalents");
    }

    /**
     * Validates the swapped recipe and, accepted, trains it on the trainer validate resolved. A recipe only a GPU
     * accepts ({@code gpuOnly}) that validate refuses here first gets the CPU equivalents of what it refused
     * ({@link CorpusSwap#cpuEquivalents}); the outcome lists them, so a QLoRA recipe that ran as LoRA is never
     * counted as QLoRA that ran.
     */
    private static Outcome run(Path dir, String text, Path python, boolean gpuOnly) throws IOException {
        Path recipe = dir.resolve("recipe.yaml");
        Files.writeString(recipe, text);
        InProcess.Run check = InProcess.finetune("validate", recipe.toString());
        List<String> replaced = List.of();
        if (check.exit() != 0 && gpuOnly) {
            CorpusSwap.OnCpu onCpu = CorpusSwap.cpuEquivalents(text, refusedKeys(recipe));
            replaced = onCpu.replaced();
            Files.writeString(recipe, onCpu.text());
            check = InProcess.finetune("validate", recipe.toString());
        }
        if (check.exit() != 0) {
            return new Outcome(Stage.REFUSED_ON_SWAP, firstError(check), replaced);
        }
        // the fsdp worker's Python is the machine's to provide (validate says so): here, the test venv's
        InProcess.Run run = check.out().contains(" worker (")
                ? InProcess.finetune(recipe.toString(), "--python", python.toString())
                : InProcess.finetune(recipe.toString());
        return run.exit() == 0 ? new Outcome(Stage.RAN, "ran 2 steps", replaced) : new Outcome(Stage.FAILED_AT_START,
                "exit " + run.exit() + ": " + AxolotlCorpusRunTest.last(run.err()), replaced);
    }

    /** The keys validate's errors point at, from its report for programs (--format json). */
    static Set<String> refusedKeys(Path recipe) {
        Set<String> keys = new HashSet<>();
        JsonObject report = JsonParser.parseString(InProcess.finetune("validate", "--format", "json",
                recipe.toString()).out()).getAsJsonObject();
        for (JsonElement finding : report.getAsJsonArray("findings")) {
            JsonObject f = finding.getAsJsonObject();
            if ("error".equals(f.get("severity").getAsString()) && !f.get("key").isJsonNull()) {
                keys.add(f.get("key").getAsString());
            }
        }
        return keys;
    }

    private static String firstError(InProcess.Run run) {
        return run.err().lines().filter(l -> l.startsWith("error: ")).findFirst().orElse(AxolotlCorpusRunTest.last(run.err()));
    }

    /** The family's first variant in TinyFamilies (its plain one: llama, not llama-biases-tied). */
    private static Path tinyModel(Family family) {
        for (Map.Entry<String, JsonElement> variant : TinyFamilies.expected().entrySet()) {
            if (variant.getValue().getAsJsonObject().get("model_type").getAsString().equals(family.modelType())) {
                return TinyFamilies.model(variant.getKey());
            }
        }
        throw new IllegalStateException("TinyFamilies has no " + family.modelType() + " model");
    }
}
