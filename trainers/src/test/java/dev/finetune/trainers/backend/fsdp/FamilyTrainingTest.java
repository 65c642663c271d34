package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import dev.finetune.adapters.io.SafetensorsReader;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.model.Family;
import dev.finetune.recipes.model.ModelConfig;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.backend.SavedModelGeneration;
import dev.finetune.trainers.backend.SavedModels;
import dev.finetune.trainers.families.TinyFamilies;
import dev.finetune.trainers.generation.GenerationSettings;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The worker trains every family transformers builds, on CPU ranks: tiny random models of each (TinyFamilies), LoRA
 * and full, 5 steps, at world size 1 and 2. For each run: the worker's parameter counts are the plan's (total =
 * num_parameters(), trainable = what PEFT made of the plan's targets), each rank's measured peak is within 25 % of
 * the plan's; a LoRA adapter loads in PEFT with no missing or unexpected key, merge-lora equals PEFT's
 * merge_and_unload, and the logits {@code finetune generate --json} prints equal PEFT's, for every family: the
 * in-JVM model serves the four it implements, the torch worker the others; on the merge-lora output too. For the mixtures of experts, the worker's loss on one batch (router load-balancing loss included, the
 * trained expert LoRA applied) equals what the model's own forward computes with labels.
 *
 * <p>Each worker launch costs tens of seconds of start-up on two cores, so the suite runs the families that carry
 * the most distinct machinery (a MoE with experts LoRA and the router loss, Gemma 2's windows and four norms, Phi-3's
 * fused projections; {@code -Dfinetune.families=a,b} picks others); {@code -Dfinetune.families=all} runs every family
 * at both world sizes in both modes and prints the family table (docs/families.md).
 */
class FamilyTrainingTest {
    /** One variant per family, in the family table's order. */
    static final List<String> EVERY = List.of("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe",
            "gemma2", "gemma3", "phi3", "olmo", "olmo2", "olmo3", "granite");
    static final List<String> SUITE = List.of("mixtral", "gemma2", "phi3");
    static final long[] PROMPT = {1, 17, 42, 5, 60, 3, 33, 9, 100, 250, 7, 400};

    static String recipe(Path model, Path out, String adapter) {
        return """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                output_dir: %s
                %s
                sequence_len: 64
                sample_packing: true
                micro_batch_size: 2
                gradient_accumulation_steps: 2
                max_steps: 5
                learning_rate: 1e-3
                save_steps: 5
                seed: 7
                backend: fsdp
                hardware: cpu
                """.formatted(model, WorkerEnvironment.data("quickstart.jsonl"), out, adapter);
    }

    static final String LORA = """
            adapter: lora
            lora_r: 4
            lora_alpha: 8
            lora_dropout: 0.0
            lora_target_linear: true""";

    /** One worker run and what it reported. */
    record Run(String variant, boolean lora, int ranks, Path out, ValidatedRecipe recipe, FsdpBackend.Result result,
            String log) {
        String name() {
            return variant + (lora ? " LoRA" : " full") + " ws" + ranks;
        }
    }

    @Test
    void everyFamilyTrainsOnTheWorkerAsThePlanSays(@TempDir Path tmp) throws Exception {
        WorkerEnvironment.python();
        String chosen = System.getProperty("finetune.families", String.join(",", SUITE));
        boolean all = chosen.equals("all");
        List<String> variants = all ? EVERY : List.of(chosen.split(","));
        List<CompletableFuture<Run>> started = new ArrayList<>();
        for (String variant : variants) {
            for (boolean lora : new boolean[] {true, false}) {
                // the suite: LoRA over two ranks, full on one; the table: both at both
                for (int ranks : all ? new int[] {1, 2} : new int[] {lora ? 2 : 1}) {
                    if (!all && !lora && !variant.equals(variants.get(0))) {
                        continue;
                    }
                    started.add(FsdpRuns.start(() -> run(tmp, variant, lora, ranks)));
                    if (started.size() % 2 == 0) {
                        // two at a time: each has a core, and their single-threaded start-ups overlap
                        FsdpRuns.join(started.get(started.size() - 2));
                        FsdpRuns.join(started.get(started.size() - 1));
                    }
                }
            }
        }
        FsdpRuns.joinAll(started.toArray(CompletableFuture[]::new));
        List<Run> runs = started.stream().map(CompletableFuture::join).toList();

        // every Python view of every run, one process
        List<JsonObject> requests = new ArrayList<>();
        Map<String, Integer> index = new LinkedHashMap<>();
        for (Run run : runs) {
            if (!run.lora() || run.result() == null) {
                continue;
            }
            Path model = TinyFamilies.model(run.variant());
            index.put(run.name() + " peft", requests.size());
            requests.add(request("peft", model, run.out()));
            index.put(run.name() + " merged", requests.size());
            JsonObject merged = request("merged", model, run.out());
            merged.addProperty("out", tmp.resolve(run.variant() + "-ws" + run.ranks() + "-peft-merged").toString());
            requests.add(merged);
            ModelConfig config = ModelConfig.read(model);
            index.put(run.name() + " logits", requests.size());
            JsonObject logits = request("logits", model, run.out());
            logits.add("ids", ids(PROMPT));
            requests.add(logits);
            if (config.experts() != null) {
                index.put(run.name() + " loss", requests.size());
                JsonObject loss = request("loss", model, run.out());
                loss.add("ids", ids(PROMPT));
                loss.addProperty("worker", WorkerEnvironment.repoRoot().resolve("trainers/src/main/python").toString());
                requests.add(loss);
            }
        }
        JsonArray views = TinyFamilies.views(requests, tmp);

        List<String> problems = new ArrayList<>();
        List<String> table = new ArrayList<>();
        for (Run run : runs) {
            ModelConfig config = ModelConfig.read(TinyFamilies.model(run.variant()));
            if (run.result() == null) {
                problems.add(run.name() + ": " + run.log().substring(run.log().lastIndexOf("FAILED: ")).strip());
                table.add("| " + config.modelType() + " | " + run.name().substring(run.variant().length() + 1)
                        + " | failed | | | |");
                continue;
            }
            long planTotal = config.parameterCount();
            long planTrainable = config.parameters().trainable(run.recipe().recipe().adapter());
            long[] reported = reportedCounts(run.log());
            // the worker counts the adapters too, beside the base weights
            long planHeld = planTotal + (run.lora() ? planTrainable : 0);
            check(problems, run.name() + ": worker's parameters " + reported[0] + ", plan's " + planHeld,
                    reported[0] == planHeld);
            check(problems, run.name() + ": worker's trainable " + reported[1] + ", plan's " + planTrainable,
                    reported[1] == planTrainable);
            check(problems, run.name() + ": " + run.result().steps() + " steps", run.result().steps() == 5);

            RunPlan plan = RunPlan.of(FsdpRuns.onRanks(run.recipe(), run.ranks()), tmp, null, null, null);
            double planMb = plan.memory().estimate().peakBytes() / (1024.0 * 1024.0);
            double worstPeak = 0;
            for (Map<String, Object> rank : run.result().rankPeaks()) {
                double error = ((Number) rank.get("peak_memory_mb")).doubleValue() / planMb - 1;
                worstPeak = Math.abs(error) > Math.abs(worstPeak) ? error : worstPeak;
            }
            check(problems, run.name() + ": measured peak off the plan by " + percent(worstPeak), Math.abs(worstPeak) <= 0.25);

            String logits = "-";
            String merge = "-";
            if (run.lora()) {
                JsonObject peft = views.get(index.get(run.name() + " peft")).getAsJsonObject();
                check(problems, run.name() + ": PEFT missing " + peft.get("missing") + ", unexpected " + peft.get("unexpected"),
                        peft.getAsJsonArray("missing").isEmpty() && peft.getAsJsonArray("unexpected").isEmpty());
                check(problems, run.name() + ": PEFT trains " + peft.get("trainable") + ", the plan " + planTrainable,
                        peft.get("trainable").getAsLong() == planTrainable);
                double mergeDelta = mergeDelta(run, tmp);
                merge = String.format(Locale.ROOT, "%.1e", mergeDelta);
                check(problems, run.name() + ": merge-lora vs merge_and_unload " + merge, mergeDelta < 1e-5);
                // what finetune generate --json prints, from the engine it picks (the in-JVM model or the torch
                // worker), on the adapter and (one world size: each worker launch costs a Python start) on the
                // merge-lora output, both against PEFT's logits of the adapter
                JsonObject peftLogits = views.get(index.get(run.name() + " logits")).getAsJsonObject();
                double delta = logitDelta(run.out(), peftLogits);
                logits = String.format(Locale.ROOT, "%.1e", delta);
                check(problems, run.name() + ": generate --json logits vs PEFT " + logits, delta < 1e-4);
                if (run.ranks() == 2) {
                    double merged = logitDelta(mergedFolder(run, tmp), peftLogits);
                    logits += String.format(Locale.ROOT, " (merged %.1e)", merged);
                    check(problems, run.name() + ": generate --json on the merge-lora output vs PEFT " + merged,
                            merged < 1e-4);
                }
                logits += " " + (SavedModelGeneration.engine(run.out()).backend() == ResolvedRun.Backend.SINGLE
                        ? "[jvm]" : "[worker]");
                if (index.containsKey(run.name() + " loss")) {
                    JsonObject loss = views.get(index.get(run.name() + " loss")).getAsJsonObject();
                    double d = Math.abs(loss.get("transformers").getAsDouble() - loss.get("worker").getAsDouble());
                    System.out.printf(Locale.ROOT, "%s: one batch, transformers' loss with router aux %.6f, the worker's "
                            + "%.6f (|d| %.1e, router loss %s)%n", run.name(), loss.get("transformers").getAsDouble(),
                            loss.get("worker").getAsDouble(), d, loss.get("router").getAsBoolean() ? "on" : "off");
                    check(problems, run.name() + ": MoE loss vs transformers + PEFT " + d, d < 1e-5
                            && loss.get("router").getAsBoolean());
                }
            }
            table.add(String.format(Locale.ROOT, "| %s | %s | %s | %s | %,d = %,d%s | %s |", config.modelType(),
                    run.name().substring(run.variant().length() + 1), Family.of(config.modelType()).orElseThrow().trainers(),
                    logits + (merge.equals("-") ? "" : ", merge " + merge), planTotal, reported[0] - (planHeld - planTotal),
                    run.lora() ? String.format(Locale.ROOT, " (LoRA %,d = PEFT's)", planTrainable) : "", percent(worstPeak)));
        }
        System.out.println("| family | run | trainers | logits Δ vs PEFT, merge Δ | plan params = num_parameters() | peak vs plan |");
        System.out.println("|---|---|---|---|---|---|");
        table.forEach(System.out::println);
        assertEquals("", String.join("\n", problems));
    }

    private static Run run(Path tmp, String variant, boolean lora, int ranks) throws Exception {
        String name = variant + (lora ? "-lora" : "-full") + "-ws" + ranks;
        Path out = tmp.resolve(name);
        // the global batch is 2 micro batches either way: accumulation 2 on one rank, 1 on two
        ValidatedRecipe recipe = FsdpRuns.recipe(tmp, name, recipe(TinyFamilies.model(variant), out, lora ? LORA : ""),
                "gradient_accumulation_steps=" + (ranks == 1 ? 2 : 1));
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        FsdpBackend.Result result = null;
        try {
            result = FsdpRuns.fsdp(recipe, ranks, Map.of(), log);
        } catch (FsdpBackend.WorkerFailed e) {
            // one failed run is one problem of the table, not the end of the other 55 runs' measurements
            log.writeBytes(("\nFAILED: " + e.getMessage() + "\n").getBytes(StandardCharsets.UTF_8));
        } finally {
            System.out.println(log.toString(StandardCharsets.UTF_8));
        }
        return new Run(variant, lora, ranks, out, recipe, result, log.toString(StandardCharsets.UTF_8));
    }

    private static final Pattern COUNTS = Pattern.compile("model: ([0-9,]+) parameters, ([0-9,]+) trainable");

    /** The worker's own count of its parameters and trainable ones, as its start line reports them. */
    private static long[] reportedCounts(String log) {
        Matcher m = COUNTS.matcher(log);
        assertTrue(m.find(), "no parameter count in the log:\n" + log);
        return new long[] {Long.parseLong(m.group(1).replace(",", "")), Long.parseLong(m.group(2).replace(",", ""))};
    }

    private static double mergeDelta(Run run, Path tmp) throws Exception {
        Path ours = mergedFolder(run, tmp);
        SavedModels.mergeLora(run.out(), ours);
        double worst = 0;
        try (NDManager manager = NDManager.newBaseManager();
                SafetensorsReader theirs = SafetensorsReader.open(tmp.resolve(run.variant() + "-ws" + run.ranks() + "-peft-merged"));
                SafetensorsReader mine = SafetensorsReader.open(ours)) {
            assertEquals(new java.util.TreeSet<>(theirs.names()), new java.util.TreeSet<>(mine.names()), run.name());
            for (String name : theirs.names()) {
                NDArray a = theirs.load(name, manager);
                worst = Math.max(worst, a.sub(mine.load(name, manager)).abs().max().getFloat());
            }
        }
        return worst;
    }

    private static Path mergedFolder(Run run, Path tmp) {
        return tmp.resolve(run.variant() + "-ws" + run.ranks() + "-merged");
    }

    /**
     * The last prompt position's logits as {@code finetune generate --json} computes them for {@code dir}
     * (SavedModelGeneration: the engine it picks, the call it makes), against PEFT's last row.
     */
    private static double logitDelta(Path dir, JsonObject peft) {
        JsonArray rows = peft.getAsJsonArray("logits");
        JsonArray last = rows.get(rows.size() - 1).getAsJsonArray();
        float[] ours = SavedModelGeneration.generate(dir, SavedModelGeneration.engine(dir), List.of(PROMPT),
                GenerationSettings.greedy(1), WorkerEnvironment.python()).get(0).lastPromptLogits();
        assertEquals(last.size(), ours.length, dir + ": vocabulary");
        double worst = 0;
        for (int v = 0; v < ours.length; v++) {
            worst = Math.max(worst, Math.abs(ours[v] - last.get(v).getAsDouble()));
        }
        return worst;
    }

    private static JsonObject request(String kind, Path model, Path adapter) {
        JsonObject request = new JsonObject();
        request.addProperty("kind", kind);
        request.addProperty("model", model.toString());
        request.addProperty("adapter", adapter.toString());
        return request;
    }

    private static JsonArray ids(long[] ids) {
        JsonArray array = new JsonArray();
        for (long id : ids) {
            array.add(id);
        }
        return array;
    }

    private static String percent(double share) {
        return String.format(Locale.ROOT, "%+.0f %%", 100 * share);
    }

    private static void check(List<String> problems, String what, boolean holds) {
        if (!holds) {
            problems.add(what);
        }
    }
}
