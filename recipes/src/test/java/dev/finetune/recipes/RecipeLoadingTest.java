package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.io.TempDir;

/** Overrides, base: inheritance, the shipped library, and --flatten round trips, on real files. */
class RecipeLoadingTest {

    static Path repoRoot() {
        for (Path p = Path.of(System.getProperty("user.dir")).toAbsolutePath(); p != null; p = p.getParent()) {
            if (Files.isRegularFile(p.resolve("configs/quickstart.yaml"))) {
                return p;
            }
        }
        throw new IllegalStateException("configs/quickstart.yaml not found above " + System.getProperty("user.dir"));
    }

    static List<Path> shippedConfigs() throws IOException {
        Path configs = repoRoot().resolve("configs");
        try (Stream<Path> files = Files.walk(configs)) {
            return files.filter(p -> p.toString().endsWith(".yaml"))
                    .filter(p -> !configs.relativize(p).startsWith("models") && !configs.relativize(p).startsWith("data"))
                    .sorted().toList();
        }
    }

    /** The recipe with source positions removed: they name the file, so they differ between equal recipes. */
    static Recipe withoutLocations(Recipe r) {
        Recipe.Data d = r.data();
        return new Recipe(r.model(), r.adapter(), new Recipe.Data(strip(d.datasets()), strip(d.testDatasets()),
                d.valSetSize(), d.preparedPath(), d.trainOnInputs(), d.excessLength(), d.skipInvalidRows(), d.selection()), r.training(), r.batch(), r.precision(),
                r.objective(), r.distributed(), r.hardware(), r.backend(), r.output(),
                r.speedups());
    }

    private static List<DatasetSpec> strip(List<DatasetSpec> specs) {
        return specs.stream().map(s -> new DatasetSpec(s.path(), s.type(), s.field(), s.fieldMessages(),
                s.messagePropertyMappings(), s.rolesToTrain(), s.trainOnEos(), s.chatTemplate(), null, s.remote(),
                s.split(), s.fieldChosen(), s.fieldRejected(), s.chat(), s.source())).toList();
    }

    @TestFactory
    Stream<DynamicTest> everyShippedConfigValidatesAndHasAHeaderComment() throws IOException {
        List<Path> configs = shippedConfigs();
        assertTrue(configs.size() >= 5, "the library ships " + configs.size() + " recipes");
        return configs.stream().map(p -> DynamicTest.dynamicTest(p.getFileName().toString(), () -> {
            assertTrue(Files.readAllLines(p).get(0).startsWith("# "), p + " has no header comment");
            ValidatedRecipe v = ValidatedRecipe.load(p, List.of());
            assertFalse(v.recipe().model().baseModel().isBlank());
        }));
    }

    @TestFactory
    Stream<DynamicTest> flattenedOutputRevalidatesToTheSameRecipe() throws IOException {
        return shippedConfigs().stream().map(p -> DynamicTest.dynamicTest(p.getFileName().toString(), () -> {
            ValidatedRecipe original = ValidatedRecipe.load(p, List.of());
            String flat = original.flatten(p.getParent());
            assertFalse(flat.contains("base:"));
            Path copy = p.resolveSibling(".flat-" + p.getFileName());
            try {
                Files.writeString(copy, flat);
                ValidatedRecipe again = ValidatedRecipe.load(copy, List.of());
                assertEquals(withoutLocations(original.recipe()), withoutLocations(again.recipe()));
                assertEquals(original.plan(), again.plan());
            } finally {
                Files.deleteIfExists(copy);
            }
        }));
    }

    @Test
    void datasetTypesReadIntoTheEnumTheDataCodeSwitchesOn(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"instruction\": \"a\", \"output\": \"b\"}\n");
        Path r = dir.resolve("r.yaml");
        Files.writeString(r, "base_model: x/y\ndatasets:\n  - {path: d.jsonl, type: alpaca:alpaca}\n"
                + "  - {path: d.jsonl, type: completion}\nlearning_rate: 1e-5\nmicro_batch_size: 2\n"
                + "gradient_accumulation_steps: 2\n");
        // alpaca:alpaca is Axolotl's module:function spelling of alpaca: validate accepts it, so training must read it
        assertEquals(List.of(DatasetType.ALPACA, DatasetType.COMPLETION), ValidatedRecipe.load(r, List.of()).recipe()
                .data().datasets().stream().map(DatasetSpec::type).toList());
        assertEquals(List.of("alpaca", "chat_template", "completion", "input_output"), DatasetType.keysReadBy("sft"));
        assertEquals(List.of("chat_template", "passthrough"), DatasetType.keysReadBy("grpo"));
    }

    /** The spec's text keys the fsdp preprocess cache, so it must be the same in every JVM: the recipe's order. */
    @Test
    void messagePropertyMappingsKeepTheRecipesOrder(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}]}\n");
        Path r = dir.resolve("r.yaml");
        Files.writeString(r, "base_model: x/y\nchat_template: chatml\ndatasets:\n  - path: d.jsonl\n    type: chat_template\n"
                + "    field_messages: conversations\n    message_property_mappings: {role: from, content: value, "
                + "name: speaker, tool_calls: calls, reasoning_content: thinking}\nlearning_rate: 1e-5\n"
                + "micro_batch_size: 2\ngradient_accumulation_steps: 2\n");
        DatasetSpec spec = ValidatedRecipe.load(r, List.of()).recipe().data().datasets().get(0);
        assertEquals(List.of("role", "content", "name", "tool_calls", "reasoning_content"),
                List.copyOf(spec.messagePropertyMappings().keySet()));
    }

    /** YAML 1.1 reads a bare {@code no} as false; as the value of a choice that names "no" it means the word. */
    @Test
    void aBareNoIsTheStrategyNamedNo() {
        Path quickstart = repoRoot().resolve("configs/quickstart.yaml");
        Recipe.Output output = ValidatedRecipe.load(quickstart, List.of("save_steps=null", "eval_steps=null",
                "save_strategy=no", "eval_strategy=no")).recipe().output();
        assertEquals(SaveStrategy.NO, output.saveStrategy());
        InvalidRecipe bad = assertThrows(InvalidRecipe.class,
                () -> ValidatedRecipe.load(quickstart, List.of("save_strategy=off")));
        assertTrue(bad.errors().get(0).oneLine().contains("save_strategy"), bad.errors().get(0).oneLine());
    }

    @Test
    void overLongAndUnreadableRowPoliciesAreReadOnceIntoTheRecipe() {
        Path quickstart = repoRoot().resolve("configs/quickstart.yaml");
        Recipe.Data defaults = ValidatedRecipe.load(quickstart, List.of()).recipe().data();
        assertEquals(Recipe.ExcessLength.DROP, defaults.excessLength());
        assertFalse(defaults.skipInvalidRows());
        Recipe.Data set = ValidatedRecipe.load(quickstart,
                List.of("excess_length_strategy=truncate", "dataset_skip_invalid_rows=true")).recipe().data();
        assertEquals(Recipe.ExcessLength.TRUNCATE, set.excessLength());
        assertTrue(set.skipInvalidRows());
        InvalidRecipe bad = assertThrows(InvalidRecipe.class,
                () -> ValidatedRecipe.load(quickstart, List.of("excess_length_strategy=trunc")));
        assertTrue(bad.errors().get(0).oneLine().contains("did you mean 'truncate'"), bad.errors().get(0).oneLine());
    }

    @Test
    void quickstartPlanCountsTheLocalRows() {
        ValidatedRecipe v = ValidatedRecipe.load(repoRoot().resolve("configs/quickstart.yaml"), List.of());
        BatchPlan plan = v.plan();
        // 360 rows, 10 % held out: 324 train rows; micro 4 x 1 rank x accumulation 1: 81 steps per epoch, 2 epochs.
        assertEquals(360L, plan.rows());
        assertEquals(4, plan.global());
        SchedulePlan schedule = plan.schedule();
        assertEquals(81L, schedule.microBatchesPerEpoch());
        assertEquals(81L, schedule.stepsPerEpoch());
        assertEquals(162L, schedule.totalSteps());
        assertEquals(5L, schedule.warmupSteps());
        assertEquals(81, schedule.evalEvery(), "eval_steps 0.5 of 162 steps");
        assertEquals(4L * 256, plan.tokensPerStep());
        assertTrue(schedule.estimated(), "the quickstart packs rows, so row-derived steps are upper bounds");
        assertTrue(v.describe().contains("steps per epoch: at most 81"), v.describe());
        assertTrue(v.describe().contains("warmup steps: 5"), v.describe());
        SchedulePlan capped = ValidatedRecipe.load(repoRoot().resolve("configs/quickstart.yaml"),
                List.of("max_steps=10", "warmup_steps=null", "warmup_ratio=0.25", "save_steps=0.25")).plan().schedule();
        assertFalse(capped.estimated());
        assertEquals(10L, capped.totalSteps());
        assertEquals(3L, capped.warmupSteps(), "ceil(0.25 x 10)");
        assertEquals(3, capped.saveEvery(), "a fraction below 1 is a share of the total steps, rounded up");
        assertEquals(5, capped.evalEvery());
        SchedulePlan axolotlWarmup = ValidatedRecipe.load(repoRoot().resolve("configs/quickstart.yaml"),
                List.of("warmup_steps=null")).plan().schedule();
        assertEquals(4L, axolotlWarmup.warmupSteps(), "no warm-up key: Axolotl's 3 % of 162 steps, rounded down");
    }

    @Test
    void overridesAreReadLikeFileKeysAndNamedInErrors() {
        Path quickstart = repoRoot().resolve("configs/quickstart.yaml");
        ValidatedRecipe v = ValidatedRecipe.load(quickstart, List.of("learning_rate=5e-5", "lora_r=4", "hardware={gpus: 2}", "backend=auto"));
        assertEquals(5e-5, v.recipe().training().learningRate());
        assertEquals(4, ((AdapterSpec.Lora) v.recipe().adapter()).r());
        assertEquals(new Recipe.Hardware.Gpus(2, 1, null), v.recipe().hardware());
        assertEquals(2, v.plan().dataParallelRanks());

        InvalidRecipe bad = assertThrows(InvalidRecipe.class,
                () -> ValidatedRecipe.load(quickstart, List.of("micro_batch_size=0", "learning_rat=1")));
        List<String> lines = bad.errors().stream().map(Finding::oneLine).toList();
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("override 'micro_batch_size=0': micro_batch_size must be at least 1")), lines.toString());
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("override 'learning_rat=1': unknown key 'learning_rat'")
                && l.contains("did you mean 'learning_rate'")), lines.toString());

        UserError noEquals = assertThrows(UserError.class, () -> ValidatedRecipe.load(quickstart, List.of("lora_r")));
        assertTrue(noEquals.oneLine().startsWith("override 'lora_r': an override must look like key=value"));
        UserError intoScalar = assertThrows(UserError.class, () -> ValidatedRecipe.load(quickstart, List.of("seed.x=1")));
        assertTrue(intoScalar.getMessage().contains("has no sub-key 'x'"), intoScalar.getMessage());
    }

    @Test
    void baseMergesDeeplyWithPathsRelativeToTheFileThatWroteThem(@TempDir Path tmp) throws IOException {
        Path common = Files.createDirectories(tmp.resolve("common"));
        Files.writeString(common.resolve("train.jsonl"), "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\"}\n");
        Files.writeString(common.resolve("base.yaml"), """
                base_model: NousResearch/Llama-3.2-1B
                datasets:
                  - path: train.jsonl
                    type: completion
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                learning_rate: 1e-4
                hardware:
                  gpus: 8
                  gpu_memory: 80GiB
                trl:
                  beta: 0.2
                """);
        Path run = Files.createDirectories(tmp.resolve("runs")).resolve("mine.yaml");
        Files.writeString(run, """
                base: ../common/base.yaml
                learning_rate: 3e-4
                hardware:
                  gpus: 2
                """);
        ValidatedRecipe v = ValidatedRecipe.load(run, List.of());
        assertEquals(3e-4, v.recipe().training().learningRate());
        // Deep merge: gpus from the child, gpu_memory kept from the base.
        assertEquals(new Recipe.Hardware.Gpus(2, 1, 80L << 30), v.recipe().hardware());
        assertEquals(common.resolve("train.jsonl").toAbsolutePath().normalize(), v.recipe().data().datasets().get(0).path());
        assertEquals(3L, v.plan().rows());

        String flat = v.flatten(run.getParent());
        assertFalse(flat.contains("base:"), flat);
        assertTrue(flat.contains("path: ../common/train.jsonl"), flat);
        Path flatFile = run.resolveSibling("flat.yaml");
        Files.writeString(flatFile, flat);
        assertEquals(withoutLocations(v.recipe()), withoutLocations(ValidatedRecipe.load(flatFile, List.of()).recipe()));
    }

    @Test
    void aLocalBaseModelInABaseFileIsRelativeToThatFile(@TempDir Path tmp) throws IOException {
        Path common = Files.createDirectories(tmp.resolve("common"));
        Path model = Files.createDirectories(common.resolve("models/tiny"));
        Files.copy(Path.of("../configs/models/stories260K/config.json"), model.resolve("config.json"));
        Files.writeString(common.resolve("train.jsonl"), "{\"text\": \"a\"}\n");
        Files.writeString(common.resolve("base.yaml"), """
                base_model: ./models/tiny
                datasets:
                  - path: train.jsonl
                    type: completion
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                learning_rate: 1e-4
                """);
        Path run = Files.createDirectories(tmp.resolve("runs")).resolve("mine.yaml");
        Files.writeString(run, "base: ../common/base.yaml\n");
        assertEquals(model.toAbsolutePath().normalize().toString(),
                ValidatedRecipe.load(run, List.of()).recipe().model().baseModel(),
                "as README says: relative to the recipe file that names it");
    }

    @Test
    void batchArithmeticDerivesTheMissingNumber(@TempDir Path tmp) throws IOException {
        Path r = tmp.resolve("r.yaml");
        Files.writeString(r, """
                base_model: x/y
                datasets: [{path: org/data, type: alpaca}]
                learning_rate: 1e-4
                micro_batch_size: 4
                batch_size: 32
                hardware: {gpus: 4, nodes: 2}
                backend: fsdp
                fsdp_version: 2
                fsdp_config: {reshard_after_forward: true}
                """);
        ValidatedRecipe v = ValidatedRecipe.load(r, List.of());
        assertEquals(8, v.plan().accumulation());
        assertEquals(8, v.plan().dataParallelRanks());
        assertEquals(4 * 8 * 8, v.plan().global());
        assertNull(v.plan().rows());
        assertTrue(v.recipe().distributed().sharded());
        assertInstanceOf(Recipe.Objective.Sft.class, v.recipe().objective());
    }

    @Test
    void grpoDivisibilityErrorSuggestsTheSmallestAccumulation(@TempDir Path tmp) throws IOException {
        Path r = tmp.resolve("g.yaml");
        Files.writeString(r, """
                base_model: x/y
                rl: grpo
                trl: {num_generations: 8, reward_funcs: [format]}
                datasets: [{path: org/data, type: chat_template}]
                learning_rate: 1e-5
                micro_batch_size: 2
                gradient_accumulation_steps: 3
                """);
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(r, List.of()));
        assertTrue(e.oneLine().contains("generation batch 6") && e.oneLine().contains("gradient_accumulation_steps: 4"),
                e.oneLine());
    }

    @Test
    void ignoredKeysWarnAndUnsupportedKeysSaySo(@TempDir Path tmp) throws IOException {
        Path r = tmp.resolve("w.yaml");
        Files.writeString(r, """
                base_model: x/y
                datasets: [{path: org/data, type: alpaca}]
                learning_rate: 1e-4
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                wandb_project: demo
                load_in_8bit: false
                """);
        ValidatedRecipe v = ValidatedRecipe.load(r, List.of());
        assertTrue(v.warnings().stream().anyMatch(w -> w.message().contains("'wandb_project' is ignored")));
        InvalidRecipe e = assertThrows(InvalidRecipe.class,
                () -> ValidatedRecipe.load(r, List.of("deepspeed=zero3.json", "peft_use_dora=true")));
        assertEquals(2, e.errors().size(), e.errors().toString());
        assertTrue(e.errors().stream().allMatch(f -> f.message().contains("unsupported")));
    }
}
