package dev.finetune.trainers.train.grpo;

import dev.finetune.trainers.data.GrpoPrompt;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.lora.AdapterSwitch;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ScaleRewards;
import dev.finetune.trainers.generation.Completion;
import dev.finetune.trainers.generation.GenerationSettings;
import dev.finetune.trainers.generation.Generator;
import dev.finetune.trainers.rewards.Rewards;
import dev.finetune.trainers.train.CompletionRows;
import dev.finetune.trainers.train.ForwardPass;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.ModelInputs;
import dev.finetune.trainers.train.NoGradient;
import dev.finetune.trainers.train.Objective;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;

/**
 * Group relative policy optimisation, one micro batch at a time: sample {@code num_generations} completions of
 * every prompt with the KV-cache generator, score them, normalise the rewards within each prompt's group, and
 * take the clipped policy-ratio loss with the KL pull to the reference ({@link GrpoLoss}).
 *
 * <p>The rollout is seeded from the micro step's seed, so a resumed run samples exactly what the uninterrupted
 * one sampled. The completions are sampled by the policy being trained (one optimisation pass per rollout, TRL's
 * {@code num_iterations: 1}), so the sampling log-probabilities are the policy's own, detached. The reference is
 * the same model with its adapter switched off, run outside the gradient scope; full fine-tuning has no reference
 * without a second copy of the weights and therefore needs {@code beta: 0}.
 */
public final class GrpoObjective implements Objective<GrpoBatch> {
    private final Settings settings;
    private final LlamaTrainable model;
    private final Generator generator;
    private final AdapterSwitch adapters;
    private final Rewards rewards;
    private final Function<long[], String> decode;

    /**
     * @param sampling {@code trl.top_k}, {@code top_p}, {@code min_p}, {@code repetition_penalty}
     * @param maskTruncated {@code trl.mask_truncated_completions}: completions that end without EOS (cut at
     *     {@code max_completion_length}) take no part in the loss
     * @param eosIds a completion ends after one of these (it is part of the completion, as in TRL)
     * @param padId what fills the rows after shorter completions (never attended to, never scored)
     */
    public record Settings(int maxCompletionLength, double temperature, ScaleRewards scaleRewards, GrpoLoss loss,
            Recipe.Objective.Sampling sampling, boolean maskTruncated, Set<Long> eosIds, int padId) {

        /** TRL's defaults for what is not given: group scaling, no sampling filter, nothing masked. */
        public Settings(int maxCompletionLength, double temperature, boolean scaleRewards, GrpoLoss loss,
                Set<Long> eosIds, int padId) {
            this(maxCompletionLength, temperature, scaleRewards ? ScaleRewards.GROUP : ScaleRewards.NONE, loss,
                    Recipe.Objective.Sampling.NONE, false, eosIds, padId);
        }

        /** The recipe's {@code trl:} settings; a completion ends after {@code eosId}. */
        public static Settings of(Recipe.Objective.Grpo grpo, long eosId, int padId) {
            return new Settings(grpo.maxCompletionLength(), grpo.temperature(), grpo.scaleRewards(),
                    new GrpoLoss(grpo.lossType(), grpo.epsilon(), grpo.epsilonHigh(), grpo.delta(), grpo.beta(),
                            grpo.biasCorrectedKl(), grpo.maxCompletionLength()),
                    grpo.sampling(), grpo.maskTruncatedCompletions(), Set.of(eosId), padId);
        }
    }

    /** What reward functions read of a completion: its text without special tokens. */
    public static Function<long[], String> decoder(dev.finetune.trainers.text.Tokenizer tokenizer) {
        return ids -> tokenizer.decode(java.util.Arrays.stream(ids).mapToInt(Math::toIntExact).toArray(), true);
    }

    /** @param adapters the model's adapter switch, or {@code null} for full fine-tuning */
    public GrpoObjective(Settings settings, LlamaTrainable model, AdapterSwitch adapters, Rewards rewards,
            Function<long[], String> decode) {
        if (settings.loss().beta() != 0 && adapters == null) {
            // the recipe reader refuses this combination, so only a programming error gets here
            throw new IllegalArgumentException("GRPO with beta " + settings.loss().beta() + " needs a reference model,"
                    + " and full fine-tuning has none");
        }
        this.settings = settings;
        this.model = model;
        this.generator = new Generator(model.model());
        this.adapters = adapters;
        this.rewards = rewards;
        this.decode = decode;
    }

    @Override
    public Loss loss(GrpoBatch batch, ForwardPass forward, NDManager manager) {
        int groups = batch.prompts().size();
        int groupSize = batch.numGenerations();
        List<long[]> prompts = new ArrayList<>(groups * groupSize);
        for (GrpoPrompt prompt : batch.prompts()) {
            for (int i = 0; i < groupSize; i++) {
                prompts.add(prompt.ids());
            }
        }
        List<long[]> completions = rollout(prompts, forward.seed());
        RolloutScores scored = RolloutScores.of(batch, completions, rewards, decode, settings);
        boolean[] truncated = scored.truncated();

        CompletionRows rows = CompletionRows.of(prompts, completions, settings.padId());
        float[] mask = rows.completionMask().clone();
        if (settings.maskTruncated()) {
            for (int i = 0; i < mask.length; i++) {
                mask[i] = truncated[i / rows.columns()] ? 0f : mask[i];
            }
        }
        ModelInputs modelInputs = rows.inputs(manager);
        NDArray reference = null;
        if (settings.loss().beta() != 0) {
            try (AdapterSwitch.Restore frozen = adapters.reference()) {
                reference = rows.tokenLogProbs(NoGradient.logits(model, modelInputs), manager);
            }
        }
        CompletionRows.Scored scoredRows = rows.score(forward, modelInputs, manager);
        NDArray logp = scoredRows.logProbs();
        GrpoLoss.Result result = settings.loss().compute(logp, logp.stopGradient(), reference, scored.advantages(),
                mask, manager);

        Map<String, Double> metrics = new LinkedHashMap<>(result.metrics());
        metrics.put("entropy", maskedMean(scoredRows.stats().entropy(), mask, rows));
        metrics.putAll(scored.metrics());
        return new Loss(result.sum(), metrics, result.units());
    }

    /** TRL's {@code completions/*}: lengths over all completions and over those that ended with EOS. */
    public static Map<String, Double> completionMetrics(int[] lengths, boolean[] truncated) {
        Map<String, Double> metrics = new LinkedHashMap<>();
        metrics.put("completions/mean_length", java.util.Arrays.stream(lengths).average().orElse(0));
        metrics.put("completions/min_length", (double) java.util.Arrays.stream(lengths).min().orElse(0));
        metrics.put("completions/max_length", (double) java.util.Arrays.stream(lengths).max().orElse(0));
        int cut = 0;
        List<Integer> terminated = new ArrayList<>();
        for (int i = 0; i < lengths.length; i++) {
            if (truncated[i]) {
                cut++;
            } else {
                terminated.add(lengths[i]);
            }
        }
        metrics.put("completions/clipped_ratio", (double) cut / Math.max(1, lengths.length));
        // TRL reports 0 when no completion terminated
        metrics.put("completions/mean_terminated_length",
                terminated.stream().mapToInt(Integer::intValue).average().orElse(0));
        metrics.put("completions/min_terminated_length",
                (double) terminated.stream().mapToInt(Integer::intValue).min().orElse(0));
        metrics.put("completions/max_terminated_length",
                (double) terminated.stream().mapToInt(Integer::intValue).max().orElse(0));
        return metrics;
    }

    /** Σ of per-row sums over the counted tokens ÷ the counted tokens (rows whose mask was zeroed drop out). */
    private static double maskedMean(double[] perRowSums, float[] mask, CompletionRows rows) {
        double sum = 0;
        double tokens = 0;
        for (int r = 0; r < rows.rows(); r++) {
            int counted = 0;
            for (int t = 0; t < rows.columns(); t++) {
                counted += mask[r * rows.columns() + t] != 0 ? 1 : 0;
            }
            if (counted > 0) {
                sum += perRowSums[r];
                tokens += counted;
            }
        }
        return tokens == 0 ? 0 : sum / tokens;
    }

    /** Samples with dropout off and, for LoRA, the adapter on: the policy as it stands. */
    private List<long[]> rollout(List<long[]> prompts, long seed) {
        Recipe.Objective.Sampling filters = settings.sampling();
        GenerationSettings sampling = new GenerationSettings(settings.maxCompletionLength(),
                (float) settings.temperature(), filters.topK(), (float) filters.topP(), seed, settings.eosIds(),
                List.of(), (float) filters.minP(), (float) filters.repetitionPenalty());
        List<Completion> completions;
        if (adapters == null) {
            completions = generator.generate(prompts, sampling);
        } else {
            try (AdapterSwitch.Restore evaluating = adapters.evaluating()) {
                completions = generator.generate(prompts, sampling);
            }
        }
        return completions.stream().map(Completion::tokens).toList();
    }
}
