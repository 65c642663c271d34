package dev.finetune.trainers.parity;

import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.adapters.peft.AdapterWeights;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.recipes.DpoLossType;
import dev.finetune.trainers.data.DataDefaults;
import dev.finetune.trainers.data.PreferencePair;
import dev.finetune.trainers.data.RlRows;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.ForwardPass;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.Objective;
import dev.finetune.trainers.train.dpo.DpoBatch;
import dev.finetune.trainers.train.dpo.DpoLoss;
import dev.finetune.trainers.train.dpo.DpoObjective;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Our DPO against TRL's {@code DPOTrainer.evaluate()} on the same weights (stories260K with one LoRA adapter that
 * PEFT writes) and the same text pairs, for every loss type we accept: every metric TRL reports must agree within
 * 1e-4. The pairs are read through our data path, so
 * TRL's tokenization is part of what is compared. TRL runs in float32 as we do ({@code bf16=False}: its default
 * autocasts to bfloat16 even on CPU).
 */
class DpoTrlParityTest {
    private static final double TOLERANCE = 1e-4;
    private static final String ROWS = """
            {"prompt": "Once upon a time", "chosen": " there was a little girl.", "rejected": " the end."}
            {"prompt": "Lily had a", "chosen": " red ball.", "rejected": " big dog that liked to run and play."}
            {"prompt": "The sun", "chosen": "ny day was warm.", "rejected": " fell."}
            {"prompt": "Tom saw a bird", "chosen": ".", "rejected": " and he was very happy."}
            """;

    private record Case(String name, List<String> types, List<Double> weights, double beta, double labelSmoothing) {
        DpoLoss loss() {
            List<DpoLoss.Term> terms = new ArrayList<>();
            for (int i = 0; i < types.size(); i++) {
                terms.add(new DpoLoss.Term(DpoLossType.of(types.get(i)), weights == null ? 1 : weights.get(i)));
            }
            return new DpoLoss(terms, beta, labelSmoothing, DpoLoss.DISCOPOP_TAU);
        }

        JsonObject json() {
            JsonObject o = new JsonObject();
            o.addProperty("name", name);
            o.add("loss_type", new Gson().toJsonTree(types));
            o.add("loss_weights", weights == null ? null : new Gson().toJsonTree(weights));
            o.addProperty("beta", beta);
            o.addProperty("label_smoothing", labelSmoothing);
            return o;
        }
    }

    private static List<Case> cases() {
        List<Case> cases = new ArrayList<>();
        for (String type : List.of("sigmoid", "hinge", "ipo", "nca_pair", "bco_pair", "apo_zero", "apo_down",
                "discopop", "sft", "sigmoid_norm")) {
            cases.add(new Case(type, List.of(type), null, 0.1, 0));
        }
        // at beta 0.1 its squares reach ~70, where float32 rounding of the log-probs alone is 1e-4
        cases.add(new Case("sppo_hard", List.of("sppo_hard"), null, 0.5, 0));
        for (String type : List.of("robust", "exo_pair", "aot", "aot_unpaired")) {
            cases.add(new Case(type, List.of(type), null, 0.1, 0.1));
        }
        cases.add(new Case("sigmoid_label_smoothing_ignored", List.of("sigmoid"), null, 0.5, 0.2));
        cases.add(new Case("rpo_sigmoid_sft", List.of("sigmoid", "sft"), List.of(1.0, 0.5), 0.1, 0));
        cases.add(new Case("three_terms", List.of("sigmoid", "bco_pair", "ipo"), List.of(0.8, 0.2, 0.05), 0.3, 0));
        return cases;
    }

    @Test
    @Timeout(900)
    void everyMetricMatchesTrlEvaluateForEveryLossType(@TempDir Path dir) throws Exception {
        Path modelDir = Stories260KReference.modelDir();
        Path pairsFile = dir.resolve("pairs.jsonl");
        Files.writeString(pairsFile, ROWS);
        Path adapterDir = dir.resolve("adapter");
        JsonArray caseJson = new JsonArray();
        cases().forEach(c -> caseJson.add(c.json()));
        Files.writeString(dir.resolve("cases.json"), caseJson.toString());
        PythonStack.runScript(PythonStack.script("/parity/dpo_trl.py", dir), dir, modelDir.toString(),
                pairsFile.toString(), adapterDir.toString(), dir.resolve("cases.json").toString(),
                dir.resolve("trl.json").toString());
        JsonObject trl = JsonParser.parseString(Files.readString(dir.resolve("trl.json"))).getAsJsonObject();

        Map<String, Map<String, Double>> ours = new LinkedHashMap<>();
        try (Tokenizer tokenizer = Tokenizer.load(modelDir); NDManager manager = NDManager.newBaseManager()) {
            DatasetSpec spec = new DatasetSpec(pairsFile, DatasetType.PASSTHROUGH, DataDefaults.FIELD, null, null,
                    DataDefaults.ROLES_TO_TRAIN, DataDefaults.TRAIN_ON_EOS, null,
                    "recipe.yaml:1:1", null, "train", null, null);
            List<PreferencePair> pairs = RlRows.preferences(List.of(spec), DataDefaults.options(), tokenizer).train();
            int padId = tokenizer.special().eosId();
            LoraFactory factory = new LoraFactory(new AdapterSpec.Lora(4, 8, 0, List.of(), true, false, null),
                    manager, 1);
            LlamaModel model = LlamaModel.load(modelDir, manager, LoadOptions.adapters(factory));
            try (NDManager loading = manager.newSubManager()) {
                AdapterWeights.load(model.trainable(), AdapterFiles.read(adapterDir, loading).tensors(),
                        adapterDir.toString());
            }
            LlamaTrainable trainable = new LlamaTrainable(model);
            trainable.setTraining(false);
            DpoBatch batch = DpoBatch.of(pairs, padId);
            for (Case c : cases()) {
                try (NDScope scope = new NDScope()) {
                    Objective.Loss loss = new DpoObjective(c.loss(), trainable, factory.adapters())
                            .loss(batch, ForwardPass.of(trainable, 1, false), manager);
                    Map<String, Double> metrics = new LinkedHashMap<>(loss.metrics());
                    metrics.put("loss", (double) loss.sum().getFloat() / batch.pairs());
                    ours.put(c.name(), metrics);
                }
            }
        }

        List<String> mismatches = new ArrayList<>();
        StringBuilder table = new StringBuilder(String.format(Locale.ROOT, "%-32s %-22s %14s %14s %10s%n", "case",
                "metric", "TRL", "finetune", "|diff|"));
        double worst = 0;
        for (Case c : cases()) {
            JsonObject reference = trl.getAsJsonObject(c.name());
            for (Map.Entry<String, JsonElement> e : reference.entrySet()) {
                String key = e.getKey();
                if (List.of("runtime", "samples_per_second", "steps_per_second", "model_preparation_time",
                        // the training tokens seen so far (0 before training): the loop counts it, not the objective
                        "num_tokens")
                        .contains(key)) {
                    continue;
                }
                double expected = e.getValue().getAsDouble();
                Double actual = ours.get(c.name()).get(key);
                if (actual == null) {
                    mismatches.add(c.name() + ": no " + key);
                    continue;
                }
                double diff = Math.abs(actual - expected);
                worst = Math.max(worst, diff);
                table.append(String.format(Locale.ROOT, "%-32s %-22s %14.7f %14.7f %10.2e%n", c.name(), key, expected,
                        actual, diff));
                if (!(diff <= TOLERANCE)) {
                    mismatches.add(c.name() + " " + key + ": TRL " + expected + ", ours " + actual);
                }
            }
        }
        System.out.print(table);
        System.out.printf(Locale.ROOT, "largest difference %.2e over %d cases%n", worst, cases().size());
        assertTrue(mismatches.isEmpty(), String.join("\n", mismatches) + "\n" + table);
    }
}
