package dev.finetune.trainers.train;

import dev.finetune.recipes.DpoLossType;
import ai.djl.ndarray.NDManager;
import com.google.gson.JsonObject;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.RewardSpec;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.rewards.Rewards;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.dpo.DpoBatch;
import dev.finetune.trainers.train.dpo.DpoLoss;
import dev.finetune.trainers.train.dpo.DpoObjective;
import dev.finetune.trainers.data.PreferencePair;
import dev.finetune.trainers.train.grpo.GrpoBatch;
import dev.finetune.trainers.train.grpo.GrpoLoss;
import dev.finetune.trainers.train.grpo.GrpoObjective;
import dev.finetune.trainers.data.GrpoPrompt;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;

/** The DPO and GRPO runs {@link KillDrillMain} trains: LoRA on stories260K, the reference its adapter switched off. */
final class RlDrill {
    private static final List<String> OPENINGS = List.of("Once upon a time", "The little dog", "Lily saw a bird",
            "Tom had a red ball", "One day the sun");

    private RlDrill() {}

    static Trainer.Summary run(String objective, TestRuns options, NDManager manager, Trainer.Listener listener) {
        AdapterSpec.Lora spec = new AdapterSpec.Lora(4, 8, 0.1, List.of(), true, false, null);
        LoraFactory factory = new LoraFactory(spec, manager, 3);
        LlamaTrainable model = new LlamaTrainable(LlamaModel.load(Stories260KReference.modelDir(), manager,
                LoadOptions.adapters(factory)));
        try (Tokenizer tokenizer = Tokenizer.load(Stories260KReference.modelDir())) {
            if (objective.equals("dpo")) {
                List<DpoBatch> batches = new ArrayList<>();
                for (int b = 0; b < 5; b++) {
                    List<PreferencePair> pairs = new ArrayList<>();
                    for (int p = 0; p < 2; p++) {
                        String opening = OPENINGS.get((b + p) % OPENINGS.size());
                        pairs.add(new PreferencePair(ids(tokenizer, opening, true),
                                ids(tokenizer, " and they were happy.", false), ids(tokenizer, " and it was sad.", false)));
                    }
                    batches.add(DpoBatch.of(pairs, 0));
                }
                DpoObjective dpo = new DpoObjective(new DpoLoss(DpoLossType.SIGMOID, 0.1, 0), model, factory.adapters());
                return new Trainer<>(model, dpo, batches.subList(0, 4), batches.subList(4, 5), options.build(4), manager,
                        listener).run();
            }
            List<GrpoBatch> batches = new ArrayList<>();
            for (String opening : OPENINGS) {
                batches.add(new GrpoBatch(List.of(new GrpoPrompt(ids(tokenizer, opening, true), opening,
                        new JsonObject())), 2));
            }
            try (Rewards rewards = Rewards.start(List.of(new RewardSpec.Contains("the", List.of("the"), null, true),
                    new RewardSpec.Length("short", 1, 4, "words")), List.of(1.0, 0.5), false)) {
                GrpoObjective grpo = new GrpoObjective(new GrpoObjective.Settings(6, 1.0, true,
                        new GrpoLoss(0.2, 0.05), Set.of((long) tokenizer.special().eosId()), 0), model,
                        factory.adapters(), rewards, decoded -> tokenizer.decode(
                                Arrays.stream(decoded).mapToInt(Math::toIntExact).toArray(), true));
                return new Trainer<>(model, grpo, batches.subList(0, 4), batches.subList(4, 5), options.build(4), manager,
                        listener).run();
            }
        }
    }

    private static long[] ids(Tokenizer tokenizer, String text, boolean bos) {
        return Arrays.stream(tokenizer.encode(text, bos)).asLongStream().toArray();
    }
}
