package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Mapping;
import java.nio.file.Path;

/**
 * Turns a merged recipe tree into a {@link Recipe}: each supported key is read in exactly one section reader, with
 * its type check, Axolotl's default and the cross-key rules of Axolotl's schema that involve it. A new key goes
 * into the section it belongs to; rules spanning sections take the earlier sections' results as arguments.
 */
final class RecipeReader {
    private RecipeReader() {}

    /** Reads the whole tree; problems land in {@code problems}, the recipe is returned even when some are errors. */
    static Recipe read(Mapping tree, Path recipeDir, Problems problems) {
        KeyReader top = new KeyReader(tree, "", problems);
        ModelSection modelSection = new ModelSection(problems, recipeDir);
        modelSection.plugins(top);
        Recipe.Model model = modelSection.model(top);
        Recipe.Objective objective = new ObjectiveSection(problems, recipeDir).objective(top);
        AdapterSpec adapter = modelSection.adapter(top);
        Recipe.Data data = new DataSection(problems, recipeDir).data(top, objective);
        if (objective == null) {
            objective = new Recipe.Objective.Sft();
        }
        TrainingSection trainingSection = new TrainingSection(problems, recipeDir);
        Recipe.Batch batch = trainingSection.batch(top);
        Recipe.Training training = trainingSection.training(top, objective);
        ParallelismSection parallelism = new ParallelismSection(problems, recipeDir);
        Recipe.Precision precision = parallelism.precision(top);
        Recipe.Hardware hardware = parallelism.hardware(top);
        Recipe.Distributed distributed = parallelism.distributed(top, training, adapter, objective);
        Recipe.Backend backend = parallelism.backend(top, hardware, distributed, training);
        Recipe.Speedups speedups = parallelism.speedups(top, training, distributed);
        Recipe.Output output = new OutputSection(problems, recipeDir).output(top, data, adapter, objective);
        if (objective instanceof Recipe.Objective.Grpo grpo && grpo.beta() != 0 && adapter instanceof AdapterSpec.Full) {
            // the KL term needs the reference model; with LoRA it is the adapter switched off, a full fine-tune
            // would need a second copy of the weights
            problems.error(top.at(top.has("rl_beta") ? "rl_beta" : "trl"), "GRPO with beta " + YamlNumbers.fmt(grpo.beta())
                    + " needs a reference model, and a full fine-tune has none without a second copy of the weights",
                    "use adapter: lora (the reference is the adapter switched off), or trl.beta: 0");
        }
        top.finish();
        return new Recipe(model, adapter, data, training, batch, precision, objective, distributed, hardware, backend,
                output, speedups);
    }
}
