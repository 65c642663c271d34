package dev.finetune.trainers.backend;

import dev.finetune.recipes.Recipe.ExcessLength;
import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.trainers.data.DataOptions;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.RecipeOptions;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.TrainingOptions;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import dev.finetune.recipes.DatasetSpec;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * {@code backend: single}: the whole run in this JVM on one device, from a validated recipe to the output folder.
 *
 * <p>Everything that can be wrong with the input (model folder, tokenizer, every dataset row, LoRA targets,
 * schedule and optimizer names) is checked before {@code output_dir} is touched, so bad input never leaves a
 * half-written run behind.
 */
public final class SingleDeviceBackend {
    private static final Logger LOG = LogManager.getLogger(SingleDeviceBackend.class);
    /** Tokens of the before/after sample. */
    public static final int SAMPLE_TOKENS = 64;

    /**
     * @param samplePrompt the text of the before/after sample, or {@code null} to take it from the data
     * @param allowCommands the user passed {@code --allow-commands}: GRPO reward commands named in the recipe may run
     * @param out where the data report, the adapter summary, samples and the result go (the progress is logged)
     * @param plan the recipe's memory and time plan, printed next to what the first steps measure; or {@code null}
     */
    public record Settings(String samplePrompt, boolean allowCommands, PrintWriter out, RunPlan plan) {
        /** Without a plan: nothing to compare the first steps with. */
        public Settings(String samplePrompt, boolean allowCommands, PrintWriter out) {
            this(samplePrompt, allowCommands, out, null);
        }
    }

    /** What a finished run reports. */
    public record Result(Path outputDir, Trainer.Summary summary, String sampleBefore, String sampleAfter) {}

    private SingleDeviceBackend() {}

    /** Refuses what this backend cannot run, before any work: sharded runs. */
    public static void requireRunnable(Recipe recipe) {
        boolean wantsFsdp = recipe.backend() == Recipe.Backend.FSDP
                || (recipe.backend() == Recipe.Backend.AUTO
                        && (recipe.distributed().sharded() || recipe.hardware().devices() > 1));
        if (wantsFsdp) {
            throw new UserError("backend", "this recipe needs the fsdp backend (torchrun/FSDP2 over "
                    + recipe.hardware().devices() + " GPUs), which is not in this build",
                    "train on one device with backend: single and without fsdp_config (hardware: {gpus: 1} or cpu)");
        }
    }

    public static Result train(ValidatedRecipe validated, Settings settings) {
        Recipe recipe = validated.recipe();
        PrintWriter out = settings.out();
        requireRunnable(recipe);
        // the quick answer about output_dir, before data and model are loaded; claimOutput checks again under its lock
        OutputFolder.check(Path.of(recipe.output().outputDir()), inputs(validated), resuming(recipe),
                recipe.output().overwriteOutputDir());
        for (String setting : notActedOn(recipe)) {
            LOG.warn("{} (the single-device trainer does not act on it yet)", setting);
        }
        if (!(recipe.objective() instanceof Recipe.Objective.Sft)) {
            return RlTraining.train(validated, settings);
        }
        Path modelDir = localModel(recipe.model().baseModel());
        Tokenizer tokenizer = Tokenizer.load(recipe.model().tokenizerConfig() != null
                ? localModel(recipe.model().tokenizerConfig()) : modelDir);
        TrainingData<SftBatch> data = TrainingData.sft(recipe, validated.plan().micro(), tokenizer);
        out.print(data.report());
        List<SftBatch> train = data.train();
        List<SftBatch> eval = data.eval();
        Sample sample = Sample.of(data.prepared(), tokenizer, settings.samplePrompt(), SAMPLE_TOKENS);

        TrainingOptions options = RecipeOptions.from(recipe, validated.plan().accumulation(), train.size(),
                DatasetIdentity.of(recipe.data().datasets()));
        Trainer.requireResumable(options, train.size());
        out.printf(Locale.ROOT, "training: %d micro batches per epoch (as packed), %d optimizer steps, eval on %d micro batches%n",
                train.size(), Trainer.totalSteps(options, train.size()), eval.size());

        Engine.getInstance();
        try (NDManager manager = NDManager.newBaseManager()) {
            BuiltModel built = BuiltModel.forTraining(recipe, modelDir, manager);
            if (recipe.output().loraModelDir() != null) {
                built.loadAdapter(Path.of(recipe.output().loraModelDir()), manager);
            }
            out.print(built.describe());
            String before = sample.text(built.model(), tokenizer);
            out.println("sample before training: " + quoted(before));

            Path outputDir = options.outputDir();
            try (OutputFolder claimed = claimOutput(validated, options, train.size())) {
                RunFiles.start(outputDir, validated, tokenizer.directory());
                EstimateReport report = new EstimateReport(settings.plan(), out, Trainer.totalSteps(options, train.size()));
                Trainer<SftBatch> trainer = new Trainer<>(built.trainable(), new SftObjective(), train, eval, options,
                        manager, new Trainer.Listener() {
                            @Override
                            public Map<String, Object> firstStep(Map<String, Object> line) {
                                return report.firstStep(line);
                            }

                            @Override
                            public void afterStep(long step, Map<String, Object> line) {
                                report.afterStep(step, line);
                            }

                            @Override
                            public void checkpointFiles(Path folder) throws java.io.IOException {
                                built.writeCheckpointFiles(folder, recipe, tokenizer.directory());
                            }
                        });
                Trainer.Summary summary = trainer.run();
                built.trainable().setTraining(false);
                built.save(outputDir, recipe);
                String after = sample.text(built.model(), tokenizer);
                out.println("sample after training:  " + quoted(after));
                if (!Double.isNaN(summary.firstEvalLoss())) {
                    out.printf(Locale.ROOT, "eval loss: %.4f -> %.4f (%+.1f%%)%n", summary.firstEvalLoss(),
                            summary.lastEvalLoss(), 100 * (summary.lastEvalLoss() / summary.firstEvalLoss() - 1));
                }
                out.printf(Locale.ROOT, "saved %s to %s%n", built.savedWhat(), outputDir);
                return new Result(outputDir, summary, before, after);
            }
        } finally {
            tokenizer.close();
        }
    }

    /**
     * Takes {@code output_dir} for this run (see {@link OutputFolder}): called after every input check passed and
     * before the first file is written.
     */
    static OutputFolder claimOutput(ValidatedRecipe validated, TrainingOptions options, int microBatchesPerEpoch) {
        Recipe recipe = validated.recipe();
        // The resolved text is the one RunFiles writes next, so its hash names that file.
        Provenance provenance = Provenance.of(validated, validated.flatten(options.outputDir()),
                localModel(recipe.model().baseModel()).toString(), null);
        return OutputFolder.claim(new OutputFolder.Claim(options.outputDir(), inputs(validated),
                Trainer.resumeKeys(options, microBatchesPerEpoch), resuming(recipe),
                recipe.output().overwriteOutputDir(), provenance.toJson()));
    }

    static boolean resuming(Recipe recipe) {
        return !(recipe.output().resume() instanceof dev.finetune.recipes.Resume.Fresh);
    }

    /** Every local file or folder the run reads, by the key that names it: output_dir may be none of them. */
    static Map<Path, String> inputs(ValidatedRecipe validated) {
        Recipe recipe = validated.recipe();
        Map<Path, String> inputs = new LinkedHashMap<>();
        for (Path recipeFile : Provenance.recipeFiles(validated.tree())) {
            inputs.put(recipeFile, "the recipe");
        }
        addIfLocal(inputs, recipe.model().baseModel(), "base_model");
        addIfLocal(inputs, recipe.model().baseModelConfig(), "base_model_config");
        addIfLocal(inputs, recipe.model().tokenizerConfig(), "tokenizer_config");
        addIfLocal(inputs, recipe.output().loraModelDir(), "lora_model_dir");
        for (DatasetSpec dataset : recipe.data().datasets()) {
            if (dataset.local()) {
                inputs.put(dataset.path(), "datasets");
            }
        }
        for (DatasetSpec dataset : recipe.data().testDatasets()) {
            if (dataset.local()) {
                inputs.put(dataset.path(), "test_datasets");
            }
        }
        return inputs;
    }

    private static void addIfLocal(Map<Path, String> inputs, String name, String key) {
        if (name != null && !name.isBlank() && Files.exists(Path.of(name))) {
            inputs.put(Path.of(name), key);
        }
    }

    /** Settings the recipe may hold that this trainer accepts but does not carry out, said rather than hidden. */
    static List<String> notActedOn(Recipe recipe) {
        List<String> settings = new java.util.ArrayList<>();
        if (recipe.data().preparedPath() != null) {
            settings.add("dataset_prepared_path: the data is tokenized again on every start");
        }
        if (recipe.output().earlyStoppingPatience() != null) {
            settings.add("early_stopping_patience: training runs all its steps");
        }
        if ("best".equals(recipe.output().saveStrategy())) {
            settings.add("save_strategy: best: checkpoints are saved by save_steps");
        }
        if (recipe.training().evalSamplePacking() != recipe.training().samplePacking()) {
            settings.add("eval_sample_packing: evaluation is packed exactly when sample_packing is on");
        }
        return settings;
    }

    /** The recipe's top-level data settings. */
    public static DataOptions dataOptions(Recipe recipe) {
        return new DataOptions(recipe.training().sequenceLen(), recipe.data().trainOnInputs(),
                recipe.training().samplePacking(), recipe.data().valSetSize(), recipe.training().seed(),
                recipe.data().excessLength(), recipe.data().skipInvalidRows(), recipe.model().chatTemplate(),
                recipe.model().chatTemplateJinja());
    }

    /** This build reads models from local folders only and never downloads. */
    public static Path localModel(String name) {
        Path dir = Path.of(name);
        if (!Files.isDirectory(dir)) {
            throw new UserError("base_model", "'" + name + "' is not a local model folder, and this build never downloads",
                    "download the model (config.json, safetensors, tokenizer.json) and point base_model at its folder");
        }
        return dir;
    }

    private static String quoted(String text) {
        return "\"" + text.replace("\n", "\\n") + "\"";
    }
}
