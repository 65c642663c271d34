package dev.finetune.trainers.backend;

import dev.finetune.recipes.DataSelection;
import dev.finetune.recipes.Recipe;
import dev.finetune.trainers.data.DataOptions;
import dev.finetune.trainers.data.DataPipeline;
import dev.finetune.trainers.data.GrpoPrompt;
import dev.finetune.trainers.data.PreferencePair;
import dev.finetune.trainers.data.PreparedData;
import dev.finetune.trainers.data.RlRows;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.dpo.DpoBatch;
import dev.finetune.trainers.train.grpo.GrpoBatch;
import dev.finetune.trainers.train.sft.SftBatch;
import java.util.ArrayList;
import java.util.List;

/**
 * The micro batches a recipe trains and evaluates on, tokenized, masked and packed: the one code path both backends
 * take (the JVM trainer directly, the fsdp worker through {@code finetune preprocess}'s file), so that they see the
 * same numbers.
 *
 * @param rows dataset rows read
 * @param report what to print about the data
 * @param prepared SFT: the tokenized examples (the before/after sample takes its prompt from them); else null
 */
public record TrainingData<B>(List<B> train, List<B> eval, long rows, String report, PreparedData prepared) {

    /** SFT: the epoch-0 packing of the training examples, and the eval split or the test datasets. */
    public static TrainingData<SftBatch> sft(Recipe recipe, int micro, Tokenizer tokenizer) {
        DataOptions options = DataOptions.of(recipe);
        PreparedData data = DataPipeline.prepare(recipe.data().datasets(), options, tokenizer);
        boolean evalPacking = recipe.training().evalSamplePacking();
        PreparedData tests = recipe.data().testDatasets().isEmpty() ? null
                : DataPipeline.prepare(recipe.data().testDatasets(), testOptions(recipe, options), tokenizer);
        int evalMicro = recipe.batch().evalBatchSize() != null ? recipe.batch().evalBatchSize() : micro;
        List<SftBatch> train = SftBatches.of(data.trainBatches(0, micro));
        List<SftBatch> eval = SftBatches.of(tests != null ? tests.trainBatches(0, evalMicro)
                : data.evalBatches(evalMicro, evalPacking));
        long rows = data.report().datasets().stream().mapToLong(d -> d.rows()).sum();
        return new TrainingData<>(train, eval, rows, data.report().describe(), data);
    }

    /**
     * How {@code test_datasets} are read: whole (no split, no shard; the training data's shuffles and curriculum order
     * are no business of evaluation), cut at {@code eval_sequence_len}, packed per {@code eval_sample_packing}.
     */
    static DataOptions testOptions(Recipe recipe, DataOptions options) {
        DataSelection selection = options.selection();
        return options.withValSetSize(0).withSequenceLen(recipe.training().evalSequenceLen())
                .withSamplePacking(recipe.training().evalSamplePacking())
                .withSelection(new DataSelection(selection.minSampleLen(), 0, 0, selection.exactDeduplication(), false,
                        true, false, false));
    }

    /** DPO: preference pairs in micro batches of {@code micro} pairs, chosen rows first. */
    public static TrainingData<DpoBatch> dpo(Recipe recipe, int micro, Tokenizer tokenizer) {
        DataOptions options = DataOptions.of(recipe);
        RlRows.Split<PreferencePair> pairs = RlRows.preferences(recipe.data().datasets(), options, tokenizer);
        List<PreferencePair> evalPairs = recipe.data().testDatasets().isEmpty() ? pairs.eval()
                : RlRows.preferences(recipe.data().testDatasets(), testOptions(recipe, options), tokenizer).train();
        int padId = padId(tokenizer);
        String report = String.format(java.util.Locale.ROOT, "dpo: %d pairs for training, %d held out (%d rows read, "
                + "%d longer than sequence_len, %d invalid skipped)%n", pairs.train().size(), evalPairs.size(),
                pairs.rows(), pairs.tooLong(), pairs.skipped());
        return new TrainingData<>(chunks(pairs.train(), micro, padId), chunks(evalPairs, micro, padId), pairs.rows(),
                report, null);
    }

    /**
     * GRPO: prompts in micro batches of whole groups, {@code micro / num_generations} prompts each (at least one),
     * because a prompt's advantages are normalised within its group.
     */
    public static TrainingData<GrpoBatch> grpo(Recipe recipe, Recipe.Objective.Grpo grpo, int micro,
            Tokenizer tokenizer) {
        DataOptions options = DataOptions.of(recipe);
        RlRows.Split<GrpoPrompt> prompts = RlRows.prompts(recipe.data().datasets(), options, tokenizer);
        List<GrpoPrompt> evalPrompts = recipe.data().testDatasets().isEmpty() ? prompts.eval()
                : RlRows.prompts(recipe.data().testDatasets(), testOptions(recipe, options), tokenizer).train();
        int generations = grpo.numGenerations();
        int perMicro = promptsPerMicro(micro, generations);
        String report = String.format(java.util.Locale.ROOT, "grpo: %d prompts for training, %d held out (%d rows "
                + "read), %d prompt(s) x %d completions per micro batch%n", prompts.train().size(), evalPrompts.size(),
                prompts.rows(), perMicro, generations);
        return new TrainingData<>(groups(prompts.train(), perMicro, generations),
                groups(evalPrompts, perMicro, generations), prompts.rows(), report, null);
    }

    /** The pad id of rows: the tokenizer's pad token, else EOS, else 0. */
    public static int padId(Tokenizer tokenizer) {
        return tokenizer.special().padId() >= 0 ? tokenizer.special().padId() : Math.max(0, tokenizer.special().eosId());
    }

    /** Prompts per GRPO micro batch: whole groups only. */
    public static int promptsPerMicro(int micro, int numGenerations) {
        return Math.max(1, micro / numGenerations);
    }

    private static List<GrpoBatch> groups(List<GrpoPrompt> prompts, int size, int generations) {
        List<GrpoBatch> out = new ArrayList<>();
        for (int from = 0; from < prompts.size(); from += size) {
            out.add(new GrpoBatch(prompts.subList(from, Math.min(prompts.size(), from + size)), generations));
        }
        return out;
    }

    private static List<DpoBatch> chunks(List<PreferencePair> pairs, int size, int padId) {
        List<DpoBatch> out = new ArrayList<>();
        for (int from = 0; from < pairs.size(); from += size) {
            out.add(DpoBatch.of(pairs.subList(from, Math.min(pairs.size(), from + size)), padId));
        }
        return out;
    }
}
