package dev.finetune.trainers.backend;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.PrecisionRegime;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.ModelInputs;
import dev.finetune.trainers.train.TokenScores;
import dev.finetune.trainers.train.TrainableModel;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;

/**
 * The model as the recipe's {@link AdapterSpec} builds it, with its {@link TrainedWeights}: every weight trainable,
 * or frozen (NF4 for QLoRA) with LoRA adapters on the matched layers. Knows what to print about it and what to save
 * after training.
 */
final class BuiltModel {
    private final LlamaModel model;
    private final TrainedWeights weights;
    private final TrainableModel<LlamaTrainable.Shared> trainable;

    private BuiltModel(LlamaModel model, TrainedWeights weights) {
        this.model = model;
        this.weights = weights;
        this.trainable = new Switched(new LlamaTrainable(model), weights);
    }

    static BuiltModel forTraining(ValidatedRecipe validated, Path modelDir, NDManager manager) {
        Recipe recipe = validated.recipe();
        BuiltModel built;
        if (recipe.adapter() instanceof AdapterSpec.Lora spec) {
            LoraFactory factory = new LoraFactory(spec, manager, recipe.training().seed());
            LlamaModel model = LlamaModel.load(modelDir, manager, LoadOptions.adapters(factory));
            factory.requireMatches();
            built = new BuiltModel(model, new TrainedWeights.Adapter(spec, factory));
        } else {
            built = new BuiltModel(LlamaModel.load(modelDir, manager, LoadOptions.fullFineTune()), new TrainedWeights.Full(modelDir));
        }
        built.model.setBfloat16Compute(validated.run().precision() == PrecisionRegime.CPU_BF16_AUTOCAST);
        return built;
    }

    LlamaModel model() {
        return model;
    }

    TrainedWeights weights() {
        return weights;
    }

    TrainableModel<LlamaTrainable.Shared> trainable() {
        return trainable;
    }

    /** Which layers train and how many parameters that is, e.g. for a LoRA recipe the matched modules. */
    String describe() {
        String compute = model.bfloat16Compute()
                ? "compute: bf16 mixed precision (bf16: true): matrix multiplies and attention in bfloat16; weights, "
                        + "gradients, optimizer state, norms and the loss in float32" + (CpuFeatures.bfloat16Units()
                                ? "" : "; this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16), so this is "
                                        + "slower than float32 here: set bf16: false")
                        + "%n"
                : "";
        return weights.describe(model) + String.format(Locale.ROOT, compute);
    }

    /**
     * The trained result in Hugging Face layout, each file written under a temporary name and renamed: see
     * {@link TrainedWeights#save}.
     */
    void save(Path outputDir, Recipe recipe) {
        try {
            Files.createDirectories(outputDir);
            weights.save(model, outputDir, recipe.model().baseModel());
        } catch (IOException | java.io.UncheckedIOException e) {
            removeStaging(outputDir);
            throw new UserError(outputDir.toString(), "cannot write the trained weights (" + e.getMessage()
                    + "); the partial copy was removed, and the last checkpoint holds the trained state",
                    "free space on the disk of output_dir, then rerun with resume_from_checkpoint=true", e);
        }
    }

    /** Deletes half-written staging folders of {@link #save}; nothing in them was published. */
    private static void removeStaging(Path outputDir) {
        try (var children = Files.list(outputDir)) {
            for (Path child : children.toList()) {
                String name = child.getFileName().toString();
                if (Files.isDirectory(child) && (name.startsWith(".adapter-") || name.startsWith(".model-"))) {
                    try (var walk = Files.walk(child)) {
                        for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
                            Files.deleteIfExists(p);
                        }
                    }
                }
            }
        } catch (IOException e) {
            // best effort: a leftover hidden folder holds nothing anyone reads
        }
    }

    /**
     * What turns a checkpoint's weights into a folder the HF stack opens: {@code adapter_config.json} next to the
     * adapter (PeftModel.from_pretrained), or the base's {@code config.json} next to a full model's weights; and
     * the tokenizer, as the HF Trainer saves it with every checkpoint.
     */
    void writeCheckpointFiles(Path folder, Recipe recipe, Path tokenizerDir) throws IOException {
        weights.writeConfig(folder, recipe.model().baseModel());
        RunFiles.copyTokenizer(tokenizerDir, folder);
    }

    /**
     * The Llama model with LoRA dropout following the loop's train/eval switch: the loop calls
     * {@link #setTraining} around training steps and evaluations, and the weights pass it on to their adapters.
     */
    private record Switched(LlamaTrainable model, TrainedWeights weights)
            implements TrainableModel<LlamaTrainable.Shared> {
        @Override
        public List<NamedArray> trainable() {
            return model.trainable();
        }

        @Override
        public long parameterCount() {
            return model.parameterCount();
        }

        @Override
        public void setTraining(boolean training) {
            model.setTraining(training);
            weights.setTraining(training);
        }

        @Override
        public LlamaTrainable.Shared prepare(ModelInputs inputs) {
            return model.prepare(inputs);
        }

        @Override
        public NDArray embed(ModelInputs inputs) {
            return model.embed(inputs);
        }

        @Override
        public List<? extends Layer<LlamaTrainable.Shared>> layers() {
            return model.layers();
        }

        @Override
        public NDArray finalNormAndHead(NDArray hidden) {
            return model.finalNormAndHead(hidden);
        }

        @Override
        public TokenScores.Sft sftScores(NDArray hidden, long[] targets, float[] weights, NDManager manager) {
            return model.sftScores(hidden, targets, weights, manager);
        }

        @Override
        public TokenScores.PerToken perTokenScores(NDArray hidden, long[] targets, float[] weights,
                NDManager manager) {
            return model.perTokenScores(hidden, targets, weights, manager);
        }
    }
}
