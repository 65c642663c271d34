package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.model.ModelSource;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.backend.fsdp.WorkerPlan;
import dev.finetune.trainers.backend.fsdp.WorkerPlanFile;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The plan of the shipped GPU recipes, term by term, against what the worker itself holds per rank for the same plan
 * at the same world size: {@code finetune_worker meta-terms} builds, shards and steps the model on the meta device in
 * a fake process group (no weights, no GPU, one process per rank asked), and counts with the function a run reports
 * with. The model folder holds only the {@code config.json} the plan read (the built-in table's row). The plan describes
 * the first rank, the largest: its terms must be the worker's to the byte, and no other rank may hold more.
 */
class WorkerMetaTermsTest {

    private static final Path CONFIGS = MainProcessTest.repoRoot().resolve("configs");

    @Test
    void llama70bFullFineTuneOnEightRanksHoldsWhatThePlanSays(@TempDir Path dir) throws IOException {
        Map<String, Long> planned = compare("llama-3.1-70b/full-fsdp.yaml", dir);
        assertEquals(List.of("weights", "gradients", "optimizer_state"), List.copyOf(planned.keySet()));
    }

    @Test
    void qwen7bLoraDpoOnOneGpuHoldsWhatThePlanSays(@TempDir Path dir) throws IOException {
        Map<String, Long> planned = compare("qwen2.5-7b/lora-dpo.yaml", dir);
        assertEquals(List.of("weights", "adapter", "gradients", "optimizer_state"), List.copyOf(planned.keySet()));
    }

    /**
     * Over 3 ranks nothing of Qwen2.5-7B's LoRA run divides evenly (16-row LoRA A, 3584-wide hidden): FSDP2 gives the
     * first rank ⌈rows / 3⌉ rows of each tensor, 5.6 % more adapter than a third, and the plan says so.
     */
    @Test
    void anUnevenSplitIsPlannedAsTheFirstRanksPaddedRows(@TempDir Path dir) throws IOException {
        compare("qwen2.5-7b/lora-dpo.yaml", dir, "backend=fsdp", "hardware={gpus: 3, gpu_memory: 80GiB}");
    }

    /**
     * A mixture of experts (a family the JVM trainer does not run, so PEFT makes the adapter on the targets the plan
     * counted): LoRA on the stacked experts is PEFT's {@code ParamWrapper}, A {@code [r·experts, in]} and
     * B {@code [out, r·experts]}, whose rows split over 3 ranks no more evenly than a 32-wide hidden size or a
     * 512-token vocabulary.
     */
    @Test
    void aMixtureOfExpertsLoraOnThreeRanksHoldsWhatThePlanSays(@TempDir Path dir) throws IOException {
        Path mixtral = WorkerPlanContractTest.tinyMixtral(dir);
        compare("quickstart.yaml", dir.resolve("run"), "base_model=" + mixtral,
                "tokenizer_config=" + CONFIGS.resolve("models/stories260K"), "backend=fsdp",
                "hardware={gpus: 3, gpu_memory: 80GiB}");
    }

    /**
     * QLoRA's base is quantized by bitsandbytes from the real weights on a GPU, and its paged 8-bit AdamW keeps
     * bitsandbytes' own state: neither exists on the meta device. Its LoRA-equivalent (the same adapter on a bf16 base,
     * torch's AdamW) is planned and counted term by term; of the QLoRA plan itself, the adapter and its gradients are
     * the same tensors and must be the same bytes.
     */
    @Test
    void llama8bQloraAdapterAndGradientsAreItsLoraEquivalentsOnes(@TempDir Path dir) throws IOException {
        Map<String, Long> equivalent = compare("llama-3.1-8b/qlora-sft.yaml", dir, "adapter=lora",
                "load_in_4bit=false", "optimizer=adamw_torch_fused");
        Path recipe = CONFIGS.resolve("llama-3.1-8b/qlora-sft.yaml");
        ValidatedRecipe qlora = ValidatedRecipe.load(recipe, List.of("output_dir=" + dir.resolve("qlora-out")),
                LaunchShape.RECIPE);
        Map<String, Long> quantized = RunPlan.of(qlora, recipe.getParent(), null, null, null).memory().estimate()
                .tensorTerms();
        for (String term : List.of("adapter", "gradients")) {
            assertEquals(equivalent.get(term), quantized.get(term), term + ": QLoRA's plan and its LoRA-equivalent's");
        }
    }

    /**
     * Plans {@code config} (with {@code overrides}) as {@code finetune plan} does, writes the worker plan the launcher
     * would, has the worker count its first and last rank on the meta device, and asserts each term; returns the plan's.
     */
    private static Map<String, Long> compare(String config, Path dir, String... overrides) throws IOException {
        Path recipe = CONFIGS.resolve(config);
        List<String> all = new ArrayList<>(List.of(overrides));
        all.add("output_dir=" + dir.resolve("out"));
        ValidatedRecipe validated = ValidatedRecipe.load(recipe, all, LaunchShape.RECIPE);
        Map<String, Long> planned = RunPlan.of(validated, recipe.getParent(), null, null, null).memory().estimate()
                .tensorTerms();
        ModelSource.Found found = (ModelSource.Found) RunPlan.source(validated, recipe.getParent(), null);
        Path model = Files.createDirectories(dir.resolve("model"));
        Files.writeString(model.resolve("config.json"), found.json().toString());
        // the worker plan's resume key names the dataset, which the HF cache here does not hold: a local file of the
        // same kind stands in (the data decides no tensor's size)
        List<String> local = new ArrayList<>(all);
        local.add(validated.recipe().objective() instanceof Recipe.Objective.Dpo
                ? "datasets=[{path: " + CONFIGS.resolve("data/quickstart-dpo.jsonl") + ", type: passthrough}]"
                : "datasets=[{path: " + CONFIGS.resolve("data/quickstart.jsonl") + ", type: completion}]");
        ValidatedRecipe launched = ValidatedRecipe.load(recipe, local, LaunchShape.RECIPE);
        assertEquals(planned, RunPlan.of(launched, recipe.getParent(), null, null, null).memory().estimate()
                .tensorTerms(), "the stand-in data changes no tensor term");
        WorkerPlanFile plan = WorkerPlan.contents(launched, dir.resolve("batches.safetensors"), 1000, model,
                "model-identity", model, null);
        initialAdapterConfig(validated, plan, found);
        Path planFile = Files.writeString(dir.resolve("plan.json"), plan.toJson());
        Path result = dir.resolve("meta-terms.json");
        PythonStack.runWorker(dir, "meta-terms", planFile.toString(), result.toString());
        JsonObject counted = JsonParser.parseString(Files.readString(result)).getAsJsonObject();

        int ranks = validated.run().worldSize();
        assertEquals(ranks, counted.get("world_size").getAsInt());
        JsonArray byRank = counted.getAsJsonArray("ranks");
        StringBuilder table = new StringBuilder(String.format(Locale.ROOT, "%s%s, world size %d, %s; MiB per device:%n",
                config, overrides.length > 0 ? " " + String.join(" ", overrides) : "", ranks,
                counted.get("precision").getAsString()));
        table.append(String.format(Locale.ROOT, "  %-16s %14s", "term", "plan"));
        for (JsonElement rank : byRank) {
            table.append(String.format(Locale.ROOT, " %14s", "rank " + rank.getAsJsonObject().get("rank").getAsInt()));
        }
        table.append('\n');
        for (Map.Entry<String, Long> term : planned.entrySet()) {
            table.append(String.format(Locale.ROOT, "  %-16s %14.3f", term.getKey(), mib(term.getValue())));
            for (JsonElement rank : byRank) {
                long b = rank.getAsJsonObject().getAsJsonObject("tensors").get(term.getKey()).getAsLong();
                table.append(String.format(Locale.ROOT, " %14.3f (%+d B)", mib(b), b - term.getValue()));
            }
            table.append('\n');
        }
        System.out.print(table);
        // the plan describes the first rank: FSDP2 pads every tensor's dim 0 to a multiple of the ranks, and where a
        // split is uneven the last rank holds fewer rows of gradients and moments (its weights' storage is padded too)
        JsonObject first = byRank.get(0).getAsJsonObject();
        assertEquals(0, first.get("rank").getAsInt());
        for (JsonElement element : byRank) {
            JsonObject rank = element.getAsJsonObject();
            JsonObject tensors = rank.getAsJsonObject("tensors");
            String who = config + " rank " + rank.get("rank").getAsInt() + " of " + ranks + ": ";
            TreeSet<String> held = new TreeSet<>();
            tensors.entrySet().stream().filter(e -> e.getValue().getAsLong() > 0).forEach(e -> held.add(e.getKey()));
            assertEquals(new TreeSet<>(planned.keySet()), held, who + "the terms held, and the plan's\n" + table);
            for (Map.Entry<String, Long> term : planned.entrySet()) {
                long bytes = tensors.get(term.getKey()).getAsLong();
                if (rank == first) {
                    assertEquals(term.getValue(), bytes, who + term.getKey() + ", plan and worker, bytes\n" + table);
                } else {
                    assertTrue(bytes <= term.getValue(), who + term.getKey() + " " + bytes + " B, more than the first "
                            + "rank's " + term.getValue() + " B\n" + table);
                }
            }
        }
        return planned;
    }

    /**
     * The adapter_config.json of the initial adapter the launcher writes for a family the JVM trainer runs (its
     * weights are the JVM's draw and are not needed to count them): LoRA on the targets the plan counted, by the short
     * names the JVM's factory writes when they select exactly those layers.
     */
    private static void initialAdapterConfig(ValidatedRecipe validated, WorkerPlanFile plan, ModelSource.Found found)
            throws IOException {
        WorkerPlanFile.Adapter adapter = plan.model().adapter();
        if (adapter == null || adapter.initial() == null) {
            return;
        }
        AdapterSpec.Lora lora = (AdapterSpec.Lora) validated.recipe().adapter();
        List<String> modules = found.config().parameters().peftTargets(lora).modules();
        Map<String, Boolean> shortNames = new LinkedHashMap<>();
        modules.forEach(m -> shortNames.put(m.substring(m.lastIndexOf('.') + 1), true));
        AdapterConfig.of(lora, new AdapterConfig.Targets.Names(List.copyOf(shortNames.keySet())),
                validated.recipe().model().baseModel()).write(Files.createDirectories(Path.of(adapter.initial())));
    }

    private static double mib(long bytes) {
        return bytes / (1024.0 * 1024.0);
    }
}
