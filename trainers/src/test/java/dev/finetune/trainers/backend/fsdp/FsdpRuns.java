package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import dev.finetune.recipes.LaunchShape;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.MemoryEstimate;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.backend.EstimateReport;
import dev.finetune.trainers.backend.SingleDeviceBackend;
import dev.finetune.trainers.train.output.MetricsLog;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/** Runs one recipe on the JVM trainer or on the worker under torchrun, and compares their metrics step by step. */
final class FsdpRuns {
    private FsdpRuns() {}

    /** A recipe file in {@code dir} from {@code yaml}, loaded with overrides. */
    static ValidatedRecipe recipe(Path dir, String name, String yaml, String... overrides) throws IOException {
        Path file = dir.resolve(name + ".yaml");
        Files.writeString(file, yaml);
        return ValidatedRecipe.load(file, List.of(overrides));
    }

    /** The JVM trainer's run; returns its output folder. */
    static Path jvm(ValidatedRecipe recipe) {
        SingleDeviceBackend.train(recipe, new SingleDeviceBackend.Settings("Once upon", false, writer(
                new ByteArrayOutputStream())));
        return Path.of(recipe.recipe().output().outputDir());
    }

    /** The recipe launched as {@code --nproc-per-node ranks}: its run and batch plan resolved for that many ranks. */
    static ValidatedRecipe onRanks(ValidatedRecipe recipe, int ranks) {
        return recipe.launchedAs(LaunchShape.torchrun(ranks, null));
    }

    /** The worker's run over {@code ranks} CPU processes; the captured output goes to {@code log}. */
    static FsdpBackend.Result fsdp(ValidatedRecipe recipe, int ranks, Map<String, String> environment,
            ByteArrayOutputStream log) {
        return fsdp(recipe, ranks, environment, log, false);
    }

    /**
     * @param planned whether the run gets its plan, as {@code finetune train} gives it: the first step's metrics line
     *     then holds the plan's memory beside the measured
     */
    static FsdpBackend.Result fsdp(ValidatedRecipe recipe, int ranks, Map<String, String> environment,
            ByteArrayOutputStream log, boolean planned) {
        PrintWriter out = writer(log);
        ValidatedRecipe launched = onRanks(recipe, ranks);
        Launch launch = Launch.local(launched.run(), WorkerEnvironment.python());
        RunPlan plan = planned ? RunPlan.of(launched, outputDir(recipe).getParent(), null, null, null) : null;
        return FsdpBackend.train(launched, new FsdpBackend.Settings(launch, plan, out, environment));
    }

    static PrintWriter writer(ByteArrayOutputStream bytes) {
        return new PrintWriter(new OutputStreamWriter(bytes, StandardCharsets.UTF_8), true);
    }

    static FsdpBackend.Result fsdp(ValidatedRecipe recipe, int ranks) {
        return printed(recipe, ranks, false);
    }

    /** {@link #fsdp(ValidatedRecipe, int)} with the run's plan, for {@link #tensorsMatchPlan}. */
    static FsdpBackend.Result planned(ValidatedRecipe recipe, int ranks) {
        return printed(recipe, ranks, true);
    }

    private static FsdpBackend.Result printed(ValidatedRecipe recipe, int ranks, boolean planned) {
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        try {
            return fsdp(recipe, ranks, Map.of(), log, planned);
        } finally {
            // also when the run succeeds: a later assertion on its files needs what the launcher printed
            System.out.println(log.toString(StandardCharsets.UTF_8));
        }
    }

    static Path outputDir(ValidatedRecipe recipe) {
        return Path.of(recipe.recipe().output().outputDir());
    }

    /**
     * A {@link #planned} run's first training line in metrics.jsonl: {@code memory/<term>_mb}, the bytes the largest
     * rank's own tensors hold after the first optimizer step, for exactly the terms the plan counts for this recipe
     * on this many ranks ({@link MemoryEstimate#tensorTerms}), each within 1 % of {@code plan_memory/<term>_mb}, the
     * plan's per-device figure. Tensor bytes are exact, so a wider gap is a term the plan counts wrong.
     */
    static void tensorsMatchPlan(String what, ValidatedRecipe recipe, int ranks) {
        // step 1's own line, or with logging_steps the interval's line that folds it in
        JsonObject first = MetricsLog.read(outputDir(recipe).resolve(MetricsLog.FILE)).stream()
                .filter(line -> line.has("loss")).findFirst().orElseThrow();
        MemoryEstimate plan = RunPlan.of(onRanks(recipe, ranks), outputDir(recipe).getParent(), null, null, null)
                .memory().estimate();
        Map<String, Long> planned = plan.tensorTerms();
        List<String> measured = first.keySet().stream().filter(k -> k.startsWith("memory/") && k.endsWith("_mb")
                && !k.equals("memory/load_peak_mb")).map(k -> k.substring(7, k.length() - 3)).toList();
        assertEquals(List.copyOf(planned.keySet()), measured, what + ": the terms measured, in the plan's order");
        StringBuilder report = new StringBuilder(what + ", world size " + ranks + ", MiB measured/plan:");
        for (Map.Entry<String, Long> term : planned.entrySet()) {
            double mine = first.get("memory/" + term.getKey() + "_mb").getAsDouble();
            double theirs = first.get("plan_memory/" + term.getKey() + "_mb").getAsDouble();
            assertEquals(term.getValue() / (1024.0 * 1024.0), theirs, 1e-9, what + ": the plan of this run");
            // a term the plan counts as empty (SGD's state) must be empty
            double error = theirs == 0 ? (mine == 0 ? 0 : 1) : mine / theirs - 1;
            report.append(String.format(Locale.ROOT, " %s %.4f/%.4f (%+.2f %%)", term.getKey(), mine, theirs,
                    100 * error));
            assertTrue(Math.abs(error) <= EstimateReport.TENSOR_TOLERANCE, what + ": " + term.getKey()
                    + " measured " + mine + " MiB, plan " + theirs + " MiB");
        }
        report.append(String.format(Locale.ROOT, "; load peak %.1f/%.1f", first.get("memory/load_peak_mb").getAsDouble(),
                first.get("plan_memory/load_peak_mb").getAsDouble()));
        report.append(String.format(Locale.ROOT, "; peak %.1f/%.1f", first.get("peak_memory_mb").getAsDouble(),
                first.get("plan_peak_memory_mb").getAsDouble()));
        System.out.println(report);
    }

    /**
     * Starts {@code run} on a thread of its own. Runs that do not depend on each other overlap: most of a launch is
     * single-threaded start-up (the environment check, torchrun, each rank importing torch and transformers), so one
     * after the other they leave a core idle; each run's numbers do not depend on what else runs.
     */
    static <T> CompletableFuture<T> start(Callable<T> run) {
        CompletableFuture<T> result = new CompletableFuture<>();
        Thread thread = new Thread(() -> {
            try {
                result.complete(run.call());
            } catch (Throwable t) {
                result.completeExceptionally(t);
            }
        }, "fsdp-test-run");
        thread.setDaemon(true);
        thread.start();
        return result;
    }

    /**
     * Waits for every run, then throws the first one's failure: none is left running into the next step of the test
     * (or into its deleted temporary folder) because another failed.
     */
    static void joinAll(CompletableFuture<?>... runs) {
        try {
            CompletableFuture.allOf(runs).join();
        } catch (CompletionException e) {
            // each run's own failure is thrown below, in order
        }
        for (CompletableFuture<?> run : runs) {
            join(run);
        }
    }

    /** {@code run}'s result, or what it threw (an assertion failure stays one). */
    static <T> T join(CompletableFuture<T> run) {
        try {
            return run.join();
        } catch (CompletionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof RuntimeException r) {
                throw r;
            }
            if (cause instanceof Error error) {
                throw error;
            }
            throw new IllegalStateException(cause);
        }
    }

    /** {@code key} by step from a run's metrics.jsonl. */
    static Map<Long, Double> series(Path outputDir, String key) {
        Map<Long, Double> values = new TreeMap<>();
        for (JsonObject line : MetricsLog.read(outputDir.resolve(MetricsLog.FILE))) {
            if (line.has(key)) {
                values.put(line.get("step").getAsLong(), line.get(key).getAsDouble());
            }
        }
        return values;
    }

    /** The largest |a − b| over the steps both have from {@code fromStep}; they must cover the same steps. */
    static double maxDelta(Map<Long, Double> a, Map<Long, Double> b, long fromStep) {
        Map<Long, Double> left = new TreeMap<>(a);
        Map<Long, Double> right = new TreeMap<>(b);
        left.keySet().removeIf(s -> s < fromStep);
        right.keySet().removeIf(s -> s < fromStep);
        assertEquals(left.keySet(), right.keySet(), "both runs log the same steps");
        assertTrue(!left.isEmpty(), "no steps to compare");
        double max = 0;
        for (Map.Entry<Long, Double> e : left.entrySet()) {
            assertTrue(Double.isFinite(e.getValue()), "step " + e.getKey() + " is not finite");
            max = Math.max(max, Math.abs(e.getValue() - right.get(e.getKey())));
        }
        return max;
    }
}
