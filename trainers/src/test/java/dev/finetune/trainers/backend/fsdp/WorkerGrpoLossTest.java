package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import com.google.gson.Gson;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.GrpoLossType;
import dev.finetune.trainers.train.grpo.GrpoLoss;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The worker's GRPO loss ({@code finetune_worker.grpo_loss.Loss}) against the JVM's {@link GrpoLoss} on the same fixed
 * log-probabilities, advantages and masks, for every {@code trl.loss_type} with and without the KL term, asymmetric
 * clipping, {@code delta} and a fully masked row: the summed loss, its units and TRL's metrics within 1e-6. The
 * sampling log-probabilities are shifted from the policy's so that clipping happens on both sides. (The whole-run
 * tests only exercise TRL's default {@code dapo}; this holds the other loss types together.)
 */
class WorkerGrpoLossTest {
    private static final int ROWS = 6;
    private static final int COLUMNS = 7;

    private record Case(GrpoLossType type, double beta, double epsilonHigh, Double delta, boolean biasCorrectedKl) {
        String name() {
            return type.key() + "_beta" + beta + "_eh" + epsilonHigh + (delta == null ? "" : "_delta" + delta)
                    + (biasCorrectedKl ? "_bc" : "");
        }

        JsonObject settings() {
            JsonObject o = new JsonObject();
            o.addProperty("loss_type", type.key());
            o.addProperty("epsilon", 0.2);
            o.addProperty("epsilon_high", epsilonHigh);
            // every argument of the worker's Loss, as the plan's GRPO section has them (delta may be null)
            o.add("delta", delta == null ? com.google.gson.JsonNull.INSTANCE : new com.google.gson.JsonPrimitive(delta));
            o.addProperty("beta", beta);
            o.addProperty("use_bias_correction_kl", biasCorrectedKl);
            o.addProperty("max_completion_length", COLUMNS + 1);
            return o;
        }
    }

    @Test
    void theWorkersLossEqualsTheJvmsForEveryLossType(@TempDir Path dir) throws IOException, InterruptedException {
        String python = WorkerEnvironment.python();
        float[] logp = new float[ROWS * COLUMNS];
        float[] old = new float[ROWS * COLUMNS];
        float[] ref = new float[ROWS * COLUMNS];
        float[] mask = new float[ROWS * COLUMNS];
        double[] advantages = {1.3, -0.7, 0.2, -1.1, 0.0, 0.9};
        int[] lengths = {7, 3, 5, 0, 6, 1};
        for (int r = 0; r < ROWS; r++) {
            for (int t = 0; t < lengths[r]; t++) {
                int i = r * COLUMNS + t;
                mask[i] = 1;
                logp[i] = (float) (-0.2 - 2.5 * Math.abs(Math.sin(1.3 * r + 0.7 * t)));
                old[i] = logp[i] + (float) (0.4 * Math.sin(2.1 * r + 1.9 * t));
                ref[i] = logp[i] + (float) (0.3 * Math.cos(0.9 * r + 1.1 * t));
            }
        }
        List<Case> cases = new ArrayList<>();
        for (GrpoLossType type : GrpoLossType.values()) {
            cases.add(new Case(type, 0.0, 0.2, null, false));
            cases.add(new Case(type, 0.04, 0.28, null, true));
        }
        cases.add(new Case(GrpoLossType.DAPO, 0.04, 0.28, 1.1, true));
        cases.add(new Case(GrpoLossType.GRPO, 0.1, 0.2, null, false));

        Gson gson = new Gson();
        JsonObject input = new JsonObject();
        input.add("shape", gson.toJsonTree(new int[] {ROWS, COLUMNS}));
        input.add("logp", gson.toJsonTree(logp));
        input.add("old", gson.toJsonTree(old));
        input.add("ref", gson.toJsonTree(ref));
        input.add("mask", gson.toJsonTree(mask));
        input.add("advantages", gson.toJsonTree(advantages));
        JsonObject settings = new JsonObject();
        cases.forEach(c -> settings.add(c.name(), c.settings()));
        input.add("cases", settings);
        Files.writeString(dir.resolve("input.json"), input.toString());
        JsonObject worker = runWorker(python, dir);

        List<String> mismatches = new ArrayList<>();
        StringBuilder table = new StringBuilder();
        try (NDManager manager = NDManager.newBaseManager()) {
            Shape shape = new Shape(ROWS, COLUMNS);
            for (Case c : cases) {
                GrpoLoss loss = new GrpoLoss(c.type(), 0.2, c.epsilonHigh(), c.delta(), c.beta(), c.biasCorrectedKl(),
                        COLUMNS + 1);
                GrpoLoss.Result result = loss.compute(manager.create(logp, shape), manager.create(old, shape),
                        c.beta() == 0 ? null : manager.create(ref, shape), advantages, mask, manager);
                Map<String, Double> jvm = new LinkedHashMap<>(result.metrics());
                jvm.put("sum", (double) result.sum().getFloat());
                jvm.put("units", result.units() == null ? -1.0 : result.units());
                JsonObject theirs = worker.getAsJsonObject(c.name());
                assertEquals(jvm.keySet(), theirs.keySet(), c.name() + ": the same metric names");
                for (Map.Entry<String, Double> e : jvm.entrySet()) {
                    double w = theirs.get(e.getKey()).getAsDouble();
                    double diff = Math.abs(w - e.getValue());
                    table.append(String.format(Locale.ROOT, "%-36s %-24s %14.8f %14.8f %9.2e%n", c.name(), e.getKey(),
                            e.getValue(), w, diff));
                    if (!(diff <= 1e-6)) {
                        mismatches.add(c.name() + " " + e.getKey() + ": JVM " + e.getValue() + ", worker " + w);
                    }
                }
            }
        }
        System.out.print(table);
        assertTrue(mismatches.isEmpty(), String.join("\n", mismatches));
    }

    private static JsonObject runWorker(String python, Path dir) throws IOException, InterruptedException {
        String script = String.join("\n",
                "import json, sys, torch",
                "from finetune_worker.grpo_loss import Loss",
                "data = json.load(open(sys.argv[1]))",
                "shape = data['shape']",
                "t = lambda k: torch.tensor(data[k], dtype=torch.float32).reshape(shape)",
                "out = {}",
                "for name, settings in data['cases'].items():",
                "    loss = Loss(**settings)",
                "    ref = t('ref') if loss.beta != 0 else None",
                "    total, tokens, metrics = loss.compute(t('logp'), t('old'), ref,",
                "        torch.tensor(data['advantages'], dtype=torch.float32), t('mask'))",
                "    metrics['sum'] = float(total)",
                "    metrics['units'] = tokens if settings['loss_type'] == 'dapo' else -1.0",
                "    out[name] = metrics",
                "json.dump(out, open(sys.argv[2], 'w'))");
        Files.writeString(dir.resolve("loss.py"), script);
        ProcessBuilder builder = new ProcessBuilder(python, dir.resolve("loss.py").toString(),
                dir.resolve("input.json").toString(), dir.resolve("worker.json").toString())
                .redirectErrorStream(true);
        builder.environment().put("PYTHONPATH",
                WorkerEnvironment.repoRoot().resolve("trainers/src/main/python").toString());
        Process process = builder.start();
        String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(process.waitFor(300, TimeUnit.SECONDS), "the worker's loss script did not finish");
        assertEquals(0, process.exitValue(), output);
        JsonElement parsed = JsonParser.parseString(Files.readString(dir.resolve("worker.json")));
        return parsed.getAsJsonObject();
    }
}
