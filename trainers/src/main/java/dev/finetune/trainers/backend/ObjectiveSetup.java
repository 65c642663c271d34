package dev.finetune.trainers.backend;

import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ScaleRewards;
import dev.finetune.trainers.rewards.Rewards;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.Batch;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.Objective;
import dev.finetune.trainers.train.TrainableModel;
import dev.finetune.trainers.train.dpo.DpoBatch;
import dev.finetune.trainers.train.dpo.DpoLoss;
import dev.finetune.trainers.train.dpo.DpoObjective;
import dev.finetune.trainers.train.grpo.GrpoBatch;
import dev.finetune.trainers.train.grpo.GrpoLoss;
import dev.finetune.trainers.train.grpo.GrpoObjective;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.function.Function;

/**
 * The one place where the recipe's objective becomes what the loop runs: the objective and its training and
 * evaluation micro batches ({@link TrainingData}, shared with the fsdp backend). The loop itself never learns which
 * objective it runs.
 *
 * @param report what to print about the data and the objective before training
 * @param sample SFT: the before/after generation sample, else {@code null}
 * @param rewards the reward functions to close when the run ends (reward commands are processes), or null
 */
record ObjectiveSetup<B extends Batch>(Objective<B> objective, List<B> train, List<B> eval, String report,
        Sample sample, Rewards rewards) implements AutoCloseable {

    /** Tokens of the before/after sample. */
    static final int SAMPLE_TOKENS = 64;

    /**
     * @param built the model the loop trains; DPO's reference and GRPO's generation use it too
     * @param samplePrompt the text of the before/after sample, or {@code null} to take it from the data
     * @param allowCommands the user passed {@code --allow-commands}
     * @param manager long-lived; only used while this builds (full fine-tuning DPO's reference pass)
     */
    static ObjectiveSetup<?> of(Recipe recipe, int microBatchSize, Tokenizer tokenizer, BuiltModel built,
            String samplePrompt, boolean allowCommands, NDManager manager) {
        int padId = TrainingData.padId(tokenizer);
        AdapterSwitch adapters = built.weights().adapters().orElse(null);
        return recipe.objective().<ObjectiveSetup<?>>match(
                sft -> sft(recipe, microBatchSize, tokenizer, samplePrompt,
                        built.model().config().maxPositionEmbeddings()),
                dpo -> dpo(recipe, dpo, microBatchSize, tokenizer, built.trainable(), adapters, manager),
                grpo -> grpo(recipe, grpo, microBatchSize, tokenizer, new LlamaTrainable(built.model()),
                        adapters, allowCommands, padId));
    }

    private static ObjectiveSetup<SftBatch> sft(Recipe recipe, int micro, Tokenizer tokenizer, String samplePrompt,
            int context) {
        TrainingData<SftBatch> data = TrainingData.sft(recipe, micro, tokenizer);
        Sample sample = Sample.of(data.prepared(), tokenizer, samplePrompt, SAMPLE_TOKENS, context);
        return new ObjectiveSetup<>(new SftObjective(), data.train(), data.eval(), data.report(), sample, null);
    }

    private static ObjectiveSetup<DpoBatch> dpo(Recipe recipe, Recipe.Objective.Dpo dpo, int micro, Tokenizer tokenizer,
            TrainableModel<?> trainable, AdapterSwitch adapters, NDManager manager) {
        TrainingData<DpoBatch> batches = TrainingData.dpo(recipe, micro, tokenizer);
        List<DpoLoss.Term> terms = new ArrayList<>();
        for (int i = 0; i < dpo.lossTypes().size(); i++) {
            terms.add(new DpoLoss.Term(dpo.lossTypes().get(i), dpo.lossWeights().get(i)));
        }
        DpoLoss loss = new DpoLoss(terms, dpo.beta(), dpo.labelSmoothing(), DpoLoss.DISCOPOP_TAU);
        List<DpoBatch> train = batches.train();
        List<DpoBatch> eval = batches.eval();
        // Full fine-tuning moves the only copy of the weights, so the reference is taken from them before the
        // first step (a resumed run rebuilds it the same way from the base model it loads first).
        boolean precomputed = adapters == null || dpo.precomputeRefLogProbs();
        if (precomputed) {
            train = DpoObjective.precompute(trainable, adapters, train, manager);
            eval = DpoObjective.precompute(trainable, adapters, eval, manager);
        }
        String report = batches.report() + String.format(Locale.ROOT, "dpo: loss %s, beta %s; reference: %s%n",
                terms.stream().map(t -> t.weight() == 1 ? t.type().key()
                        : t.weight() + "*" + t.type().key()).collect(java.util.stream.Collectors.joining(" + ")),
                dpo.beta(),
                precomputed ? "computed once before training" : "run beside the policy each step, outside the gradient");
        if (!eval.isEmpty()) {
            report += basePreference(precomputed ? eval
                    : DpoObjective.precompute(trainable, adapters, eval, manager));
        }
        return new ObjectiveSetup<>(new DpoObjective(loss, trainable, adapters), train, eval, report, null, null);
    }

    private static ObjectiveSetup<GrpoBatch> grpo(Recipe recipe, Recipe.Objective.Grpo grpo, int micro,
            Tokenizer tokenizer, LlamaTrainable llama, AdapterSwitch adapters, boolean allowCommands, int padId) {
        TrainingData<GrpoBatch> batches = TrainingData.grpo(recipe, grpo, micro, tokenizer);
        List<GrpoBatch> train = batches.train();
        List<GrpoBatch> eval = batches.eval();
        int generations = grpo.numGenerations();
        int promptsPerMicro = TrainingData.promptsPerMicro(micro, generations);
        GrpoObjective.Settings settings = GrpoObjective.Settings.of(grpo, tokenizer.special().eosId(), padId);
        Rewards rewards = Rewards.start(grpo.rewardFuncs(), grpo.rewardWeights(), allowCommands);
        Function<long[], String> decode = GrpoObjective.decoder(tokenizer);
        try {
            GrpoObjective objective = new GrpoObjective(settings, llama, adapters, rewards, decode);
            String report = String.format(Locale.ROOT, "grpo: %d prompts for training, %d held out; %d completions "
                    + "per prompt of up to %d tokens, %d prompt(s) per micro batch; rewards %s; loss %s, rewards "
                    + "scaled by %s, beta %s%n",
                    prompts(train), prompts(eval), generations, grpo.maxCompletionLength(),
                    promptsPerMicro, grpo.rewardFuncs().stream().map(r -> r.label()).toList(), grpo.lossType().key(),
                    grpo.scaleRewards() == ScaleRewards.NONE ? "nothing" : "the " + grpo.scaleRewards().key() + " std",
                    grpo.beta());
            if (micro % generations != 0) {
                report += String.format(Locale.ROOT, "grpo: note: micro_batch_size %d is not a multiple of "
                        + "num_generations %d; a micro batch holds whole groups, %d completions%n", micro, generations,
                        promptsPerMicro * generations);
            }
            return new ObjectiveSetup<>(objective, train, eval, report, null, rewards);
        } catch (RuntimeException e) {
            rewards.close();
            throw e;
        }
    }

    /**
     * Where training starts from: how often the reference model already finds the chosen answer likelier on the
     * held-out pairs (TRL's {@code rewards/accuracies} is 0 at step 0 by construction: policy = reference).
     */
    private static String basePreference(List<DpoBatch> scored) {
        int pairs = 0;
        int agree = 0;
        for (DpoBatch batch : scored) {
            float[] logp = batch.reference();
            for (int i = 0; i < batch.pairs(); i++) {
                pairs++;
                agree += logp[i] > logp[batch.pairs() + i] ? 1 : 0;
            }
        }
        return String.format(Locale.ROOT, "dpo: before training the reference prefers the chosen answer in %.3f of "
                + "the %d held-out pairs%n", (double) agree / pairs, pairs);
    }

    private static int prompts(List<GrpoBatch> batches) {
        return batches.stream().mapToInt(b -> b.prompts().size()).sum();
    }

    @Override
    public void close() {
        if (rewards != null) {
            rewards.close();
        }
    }
}
