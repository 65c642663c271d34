package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * The optimization: sequence length and packing, epochs and steps, learning rate and schedule, optimizer, clipping,
 * checkpointing, seed.
 */
final class TrainingSection {
    static final Set<String> OTHER_OPTIMIZERS = Set.of("adamw_torch_xla", "adamw_torch_npu_fused", "adamw_apex_fused",
            "adafactor", "adamw_anyprecision", "ademamix", "adagrad", "ademamix_8bit", "lion_8bit", "lion_32bit",
            "paged_ademamix_32bit", "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit", "rmsprop",
            "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit", "galore_adamw", "galore_adamw_8bit",
            "galore_adafactor", "galore_adamw_layerwise", "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise",
            "lomo", "adalomo", "grokadamw", "schedule_free_radam", "schedule_free_adamw", "schedule_free_sgd",
            "apollo_adamw", "apollo_adamw_layerwise", "stable_adamw", "optimi_adamw", "ao_adamw_4bit", "ao_adamw_8bit",
            "ao_adamw_fp8", "adopt_adamw", "came_pytorch", "muon", "dion", "sinkgd", "flash_adamw", "flash_adam",
            "flash_sgd", "flash_sgdw", "flash_lion", "q_galore_adamw8bit");

    private final Problems problems;
    private final Path recipeDir;

    TrainingSection(Problems problems, Path recipeDir) {
        this.problems = problems;
        this.recipeDir = recipeDir;
    }

    /** The three batch keys as written; {@link BatchPlan} derives the rest. */
    Recipe.Batch batch(KeyReader top) {
        return new Recipe.Batch(
                top.integer("micro_batch_size", null, 1),
                top.integer("gradient_accumulation_steps", null, 1),
                top.integer("batch_size", null, 1),
                top.integer("eval_batch_size", null, 1));
    }

    Recipe.Training training(KeyReader top, Recipe.Objective objective) {
        // one token predicts nothing: the shortest trainable sequence is an input and its next token
        int sequenceLen = top.integer("sequence_len", 2);
        boolean packing = top.bool("sample_packing");
        if (packing && !(objective instanceof Recipe.Objective.Sft) && top.has("rl")) {
            problems.error(top.at("sample_packing"), "sample_packing does not work with rl (preference pairs and generations are not packed)",
                    "set sample_packing: false");
        }
        boolean evalPacking = top.bool("eval_sample_packing", packing);
        if (evalPacking && top.has("rl") && !(objective instanceof Recipe.Objective.Sft)) {
            problems.warn(top.at("eval_sample_packing"), "eval_sample_packing has no effect with rl: preference pairs and "
                    + "prompts are never packed", "remove it");
            evalPacking = false;
        }
        Integer evalSequenceLen = top.integer("eval_sequence_len", null, 2);
        boolean pad = top.bool("pad_to_sequence_len", packing);
        double epochs = top.number("num_epochs", Double.MIN_VALUE, Double.MAX_VALUE);
        Integer maxSteps = top.integer("max_steps", null, 1);
        Double lr = top.number("learning_rate", null, 0, Double.MAX_VALUE);
        if (lr == null && !top.has("learning_rate")) {
            problems.error(top.where(), "learning_rate is required", "add e.g. 'learning_rate: 2e-4' (LoRA) or 1e-5 (full)");
        } else if (lr != null && lr == 0) {
            problems.error(top.at("learning_rate"), "learning_rate is 0, so nothing would be trained", "use e.g. learning_rate: 2e-4");
        }
        String schedulerName = top.string("lr_scheduler");
        LrScheduler scheduler = LrScheduler.byKey(schedulerName);
        if (scheduler == null) {
            List<String> names = java.util.Arrays.stream(LrScheduler.values()).map(LrScheduler::key).toList();
            if (LrScheduler.OTHERS.contains(schedulerName)) {
                problems.error(top.at("lr_scheduler"), "lr_scheduler: " + schedulerName + " is unsupported",
                        "use one of " + String.join(", ", names));
            } else {
                String close = Suggestions.closest(schedulerName, names);
                problems.error(top.at("lr_scheduler"), "lr_scheduler '" + schedulerName + "' is not a scheduler Axolotl knows",
                        close != null ? "did you mean '" + close + "'?" : "use one of " + String.join(", ", names));
            }
            scheduler = LrScheduler.COSINE;
        }
        double minLrRatio = top.number("cosine_min_lr_ratio", 0, 1);
        double constantRatio = top.number("cosine_constant_lr_ratio", 0, 1);
        boolean quadratic = top.bool("lr_quadratic_warmup");
        if (quadratic && scheduler != LrScheduler.COSINE) {
            problems.warn(top.at("lr_quadratic_warmup"), "lr_quadratic_warmup has no effect with lr_scheduler: "
                    + scheduler.key() + " (Axolotl shapes the cosine schedule's warm-up only)", "remove it, or use lr_scheduler: cosine");
        } else if (quadratic && minLrRatio > 0) {
            problems.warn(top.at("lr_quadratic_warmup"), "with lr_quadratic_warmup the cosine falls to 0: "
                    + "cosine_min_lr_ratio is not applied (as in Axolotl)", "remove one of them");
        }
        if (constantRatio > 0 && (scheduler != LrScheduler.COSINE || minLrRatio == 0 || quadratic)) {
            problems.warn(top.at("cosine_constant_lr_ratio"), "cosine_constant_lr_ratio has no effect without "
                    + "lr_scheduler: cosine and a cosine_min_lr_ratio above 0 (the level it holds)",
                    "add cosine_min_lr_ratio, or remove cosine_constant_lr_ratio");
        }
        Integer warmupSteps = top.integer("warmup_steps", null, 0);
        Double warmupRatio = top.number("warmup_ratio", null, 0, 1);
        if (warmupSteps != null && warmupRatio != null) {
            problems.error(top.at("warmup_ratio"), "warmup_steps and warmup_ratio are both set", "keep only one of them");
        }
        String optimizerName = top.string("optimizer");
        Optimizer optimizer = Optimizer.byName(optimizerName);
        if (optimizer == null) {
            List<String> names = new ArrayList<>();
            for (Optimizer o : Optimizer.values()) {
                names.add(o.axolotlName());
            }
            if (OTHER_OPTIMIZERS.contains(optimizerName)) {
                problems.error(top.at("optimizer"), "optimizer: " + optimizerName + " is unsupported",
                        "use adamw_torch (or adamw_torch_8bit to save memory)");
            } else {
                List<String> all = new ArrayList<>(names);
                all.addAll(OTHER_OPTIMIZERS);
                String close = Suggestions.closest(optimizerName, all);
                problems.error(top.at("optimizer"), "optimizer '" + optimizerName + "' is not an optimizer Axolotl knows",
                        close != null ? "did you mean '" + close + "'?" : "use adamw_torch");
            }
            optimizer = Optimizer.ADAMW_TORCH_FUSED;
        }
        double weightDecay = top.number("weight_decay", 0, Double.MAX_VALUE);
        double beta1 = top.number("adam_beta1", 0, 0.999999);
        double beta2 = top.number("adam_beta2", 0, 0.999999);
        double eps = top.number("adam_epsilon", Double.MIN_VALUE, 1);
        double maxGradNorm = top.number("max_grad_norm", 0, Double.MAX_VALUE);
        boolean checkpointing = Boolean.parseBoolean(top.defaultText("gradient_checkpointing"));
        YamlNode gc = top.node("gradient_checkpointing");
        if (gc instanceof Scalar s && s.value() instanceof Boolean b) {
            checkpointing = b;
        } else if (gc instanceof Scalar s && ("offload".equals(s.value()) || "offload_disk".equals(s.value()))) {
            problems.error(gc.where(), "gradient_checkpointing: " + s.value() + " (activation offloading) is unsupported",
                    "use gradient_checkpointing: true");
        } else if (gc != null) {
            problems.error(gc.where(), "gradient_checkpointing must be true or false, got " + YamlNode.describe(gc),
                    "write gradient_checkpointing: true");
        }
        Mapping gcKwargs = top.mapping("gradient_checkpointing_kwargs");
        if (gcKwargs != null) {
            KeyReader k = new KeyReader(gcKwargs, "gradient_checkpointing_kwargs.", problems);
            k.bool("use_reentrant", null);
            k.finish();
        }
        Integer seed = top.integer("seed", 0);
        Double watchdog = top.number("loss_watchdog_threshold", null, 0, Double.MAX_VALUE);
        if (watchdog == null && top.has("loss_watchdog_patience")) {
            problems.warn(top.at("loss_watchdog_patience"), "loss_watchdog_patience has no effect without "
                    + "loss_watchdog_threshold", "add loss_watchdog_threshold, or remove loss_watchdog_patience");
        }
        return new Recipe.Training(sequenceLen, packing, evalPacking, evalSequenceLen != null ? evalSequenceLen : sequenceLen, pad, epochs, maxSteps, lr == null ? 0 : lr, scheduler,
                minLrRatio, constantRatio, quadratic, warmupSteps, warmupRatio, optimizer, weightDecay, beta1, beta2, eps, maxGradNorm, checkpointing,
                seed, top.bool("stop_on_nonfinite"), watchdog, top.integer("loss_watchdog_patience", 1));
    }

}
