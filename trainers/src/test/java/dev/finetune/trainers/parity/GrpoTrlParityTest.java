package dev.finetune.trainers.parity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.adapters.peft.AdapterFiles;
import dev.finetune.adapters.peft.AdapterWeights;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.GrpoLossType;
import dev.finetune.recipes.ScaleRewards;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.CompletionRows;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.ModelInputs;
import dev.finetune.trainers.train.NoGradient;
import dev.finetune.trainers.train.grpo.Advantages;
import dev.finetune.trainers.train.grpo.GrpoLoss;
import dev.finetune.trainers.train.grpo.GrpoObjective;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Our GRPO advantages and loss against TRL's {@code _generate_and_score_completions} and {@code _compute_loss} for
 * fixed completions and rewards, on the same weights (stories260K with a LoRA adapter PEFT writes), for every
 * {@code trl.loss_type}, each {@code scale_rewards}, {@code epsilon_high}, {@code delta} and
 * {@code mask_truncated_completions}: loss and advantages within 1e-6, TRL's logged metrics within 1e-5. The
 * sampling log-probabilities are shifted from the policy's, as after an optimizer step, so clipping happens.
 */
class GrpoTrlParityTest {
    private static final int G = 4;
    private static final int MAX_COMPLETION = 8;
    private static final List<String> PROMPTS = List.of("Once upon a time", "The little dog");
    private static final double[] REWARDS = {1, 0, 0.5, 2, 1, 1, 1, 1};

    private record Case(String name, GrpoLossType type, double beta, double epsilonHigh, Double delta,
            ScaleRewards scale, boolean maskTruncated, boolean biasCorrectedKl) {
        JsonObject json() {
            JsonObject o = new JsonObject();
            o.addProperty("name", name);
            o.addProperty("loss_type", type.key());
            o.addProperty("beta", beta);
            o.addProperty("epsilon", 0.2);
            o.addProperty("epsilon_high", epsilonHigh);
            if (delta != null) {
                o.addProperty("delta", delta);
            }
            o.addProperty("scale_rewards", scale.key());
            o.addProperty("mask_truncated_completions", maskTruncated);
            o.addProperty("max_completion_length", MAX_COMPLETION);
            o.addProperty("use_bias_correction_kl", biasCorrectedKl);
            return o;
        }
    }

    private static List<Case> cases() {
        List<Case> cases = new ArrayList<>();
        for (GrpoLossType type : GrpoLossType.values()) {
            cases.add(new Case(type.key(), type, 0.0, 0.2, null, ScaleRewards.GROUP, false, true));
            cases.add(new Case(type.key() + "_kl_masked", type, 0.04, 0.28, null, ScaleRewards.GROUP, true, true));
        }
        cases.add(new Case("dapo_batch_delta", GrpoLossType.DAPO, 0.04, 0.28, 1.1, ScaleRewards.BATCH, false, true));
        cases.add(new Case("grpo_plain_kl", GrpoLossType.GRPO, 0.1, 0.2, null, ScaleRewards.GROUP, false, false));
        cases.add(new Case("grpo_unscaled", GrpoLossType.GRPO, 0.0, 0.2, null, ScaleRewards.NONE, false, true));
        return cases;
    }

    @Test
    @Timeout(900)
    void advantagesLossAndMetricsMatchTrlForEveryLossType(@TempDir Path dir) throws Exception {
        Path modelDir = Stories260KReference.modelDir();
        try (Tokenizer tokenizer = Tokenizer.load(modelDir); NDManager manager = NDManager.newBaseManager()) {
            long eos = tokenizer.special().eosId();
            List<long[]> prompts = new ArrayList<>();
            List<long[]> completions = new ArrayList<>();
            List<String> texts = List.of(" there was a cat.", " a girl", " the sun was very hot and bright", ".",
                    " ran to the park.", " was happy", " barked", " and the cat played all day long in the sun");
            for (int i = 0; i < texts.size(); i++) {
                prompts.add(ids(tokenizer, PROMPTS.get(i / G), true));
                long[] c = ids(tokenizer, texts.get(i), false);
                // odd rows end with EOS, even rows are cut at max_completion_length without it (or stop early)
                c = Arrays.copyOf(c, Math.min(c.length, MAX_COMPLETION - 1));
                if (i % 2 == 1) {
                    c = Arrays.copyOf(c, c.length + 1);
                    c[c.length - 1] = eos;
                }
                completions.add(c);
            }
            float[][] offsets = new float[completions.size()][];
            for (int i = 0; i < offsets.length; i++) {
                offsets[i] = new float[completions.get(i).length];
                for (int t = 0; t < offsets[i].length; t++) {
                    offsets[i][t] = (float) (0.3 * Math.sin(1.7 * i + 2.3 * t));
                }
            }
            JsonObject input = new JsonObject();
            Gson gson = new Gson();
            input.add("prompts", gson.toJsonTree(PROMPTS));
            input.addProperty("num_generations", G);
            input.add("completions", gson.toJsonTree(completions));
            input.add("rewards", gson.toJsonTree(REWARDS));
            input.add("old_offsets", gson.toJsonTree(offsets));
            JsonArray caseJson = new JsonArray();
            cases().forEach(c -> caseJson.add(c.json()));
            input.add("cases", caseJson);
            Files.writeString(dir.resolve("input.json"), input.toString());
            Path adapterDir = dir.resolve("adapter");
            PythonStack.runScript(PythonStack.script("/parity/grpo_trl.py", dir), dir, modelDir.toString(),
                    adapterDir.toString(), dir.resolve("input.json").toString(), dir.resolve("trl.json").toString());
            JsonObject trl = JsonParser.parseString(Files.readString(dir.resolve("trl.json"))).getAsJsonObject();

            LoraFactory factory = new LoraFactory(new AdapterSpec.Lora(4, 8, 0, List.of(), true, false, null),
                    manager, 1);
            LlamaModel model = LlamaModel.load(modelDir, manager, LoadOptions.adapters(factory));
            try (NDManager loading = manager.newSubManager()) {
                AdapterWeights.load(model.trainable(), AdapterFiles.read(adapterDir, loading).tensors(),
                        adapterDir.toString());
            }
            LlamaTrainable trainable = new LlamaTrainable(model);
            trainable.setTraining(false);
            CompletionRows rows = CompletionRows.of(prompts, completions, (int) eos);
            int promptLength = prompts.get(0).length;
            boolean[] truncated = new boolean[completions.size()];
            int[] lengths = rows.completionLengths();
            for (int i = 0; i < truncated.length; i++) {
                long[] c = completions.get(i);
                truncated[i] = c[c.length - 1] != eos;
            }

            List<String> mismatches = new ArrayList<>();
            StringBuilder table = new StringBuilder(String.format(Locale.ROOT, "%-22s %-34s %14s %14s %10s%n", "case",
                    "value", "TRL", "finetune", "|diff|"));
            for (Case c : cases()) {
                JsonObject reference = trl.getAsJsonObject(c.name());
                JsonArray trlPrompt = reference.getAsJsonArray("prompt_ids").get(0).getAsJsonArray();
                assertEquals(Arrays.toString(prompts.get(0)), gson.toJson(trlPrompt).replace(",", ", "),
                        "TRL tokenized the prompt the same way");
                Map<String, Double> ours = new LinkedHashMap<>();
                Map<String, Double> theirs = new LinkedHashMap<>();
                Advantages advantages = Advantages.of(REWARDS, G, c.scale());
                JsonArray trlAdvantages = reference.getAsJsonArray("advantages");
                for (int i = 0; i < REWARDS.length; i++) {
                    ours.put("advantage[" + i + "]", advantages.values()[i]);
                    theirs.put("advantage[" + i + "]", trlAdvantages.get(i).getAsDouble());
                }
                float[] old = new float[rows.rows() * rows.columns()];
                JsonArray trlOld = reference.getAsJsonArray("old");
                for (int i = 0; i < rows.rows(); i++) {
                    JsonArray row = trlOld.get(i).getAsJsonArray();
                    for (int t = 0; t < lengths[i]; t++) {
                        old[i * rows.columns() + promptLength - 1 + t] = row.get(t).getAsFloat();
                    }
                }
                float[] mask = rows.completionMask().clone();
                if (c.maskTruncated()) {
                    for (int i = 0; i < mask.length; i++) {
                        mask[i] = truncated[i / rows.columns()] ? 0f : mask[i];
                    }
                }
                GrpoLoss loss = new GrpoLoss(c.type(), 0.2, c.epsilonHigh(), c.delta(), c.beta(), c.biasCorrectedKl(),
                        MAX_COMPLETION);
                try (NDScope scope = new NDScope()) {
                    ModelInputs inputs = rows.inputs(manager);
                    NDArray reference0 = null;
                    if (c.beta() != 0) {
                        try (AdapterSwitch.Restore base = factory.adapters().disabled()) {
                            reference0 = rows.tokenLogProbs(NoGradient.logits(trainable, inputs), manager);
                        }
                    }
                    NDArray logits = NoGradient.logits(trainable, inputs);
                    NDArray logp = rows.tokenLogProbs(logits, manager);
                    GrpoLoss.Result result = loss.compute(logp, manager.create(old, logp.getShape()), reference0,
                            advantages.values(), mask, manager);
                    double units = result.units() != null ? result.units() : rows.rows();
                    ours.put("loss", result.sum().getFloat() / units);
                    ours.putAll(result.metrics());
                    ours.put("reward", Arrays.stream(REWARDS).average().orElse(0));
                    ours.put("reward_std", advantages.rewardStd());
                    ours.put("frac_reward_zero_std", advantages.zeroStdShare());
                    ours.putAll(GrpoObjective.completionMetrics(lengths, truncated));
                }
                theirs.put("loss", reference.get("loss").getAsDouble());
                for (Map.Entry<String, JsonElement> e : reference.getAsJsonObject("metrics").entrySet()) {
                    // entropy and num_tokens are the objective's and the loop's; the function's own reward is reward
                    if (!List.of("entropy", "num_tokens").contains(e.getKey()) && !e.getKey().startsWith("rewards/")) {
                        theirs.put(e.getKey(), e.getValue().getAsDouble());
                    }
                }
                for (Map.Entry<String, Double> e : theirs.entrySet()) {
                    Double mine = ours.get(e.getKey());
                    double tolerance = e.getKey().equals("loss") || e.getKey().startsWith("advantage") ? 1e-6 : 1e-5;
                    double diff = mine == null ? Double.NaN : Math.abs(mine - e.getValue());
                    table.append(String.format(Locale.ROOT, "%-22s %-34s %14.8f %14.8f %10.2e%n", c.name(), e.getKey(),
                            e.getValue(), mine == null ? Double.NaN : mine, diff));
                    if (!(diff <= tolerance)) {
                        mismatches.add(c.name() + " " + e.getKey() + ": TRL " + e.getValue() + ", ours " + mine);
                    }
                }
                if (c.beta() == 0) {
                    assertTrue(!ours.containsKey("kl") && !theirs.containsKey("kl"), "no kl at beta 0 on either side");
                }
            }
            System.out.print(table);
            assertTrue(mismatches.isEmpty(), String.join("\n", mismatches) + "\n" + table);
        }
    }

    private static long[] ids(Tokenizer tokenizer, String text, boolean bos) {
        return Arrays.stream(tokenizer.encode(text, bos)).asLongStream().toArray();
    }
}
