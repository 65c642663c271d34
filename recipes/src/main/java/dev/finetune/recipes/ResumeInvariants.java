package dev.finetune.recipes;

import java.util.Map;
import java.util.TreeMap;

/**
 * What a checkpoint is only valid for: the weights' shapes and meaning, and the data stream's composition. Keyed
 * by recipe key, so a refused resume names the key that changed ({@code lora_r: 8 → 4}).
 */
public final class ResumeInvariants {
    private ResumeInvariants() {}

    /**
     * @param datasetIdentity a fingerprint of the training data (files and their contents)
     * @param baseModelIdentity what the base model's weights are: a local folder's content hash, or a hub id with
     *     the commit it resolved to. The same path holding other weights is another run.
     */
    public static Map<String, String> of(Recipe recipe, String datasetIdentity, String baseModelIdentity) {
        Map<String, String> keys = new TreeMap<>();
        keys.put("base_model", recipe.model().baseModel());
        keys.put("base_model_content", baseModelIdentity);
        if (recipe.adapter() instanceof AdapterSpec.Lora lora) {
            keys.put("adapter", lora.quantized() ? "qlora" : "lora");
            keys.put("lora_r", Integer.toString(lora.r()));
            keys.put("lora_alpha", Double.toString(lora.alpha()));
            keys.put("lora_target_modules", String.valueOf(lora.targetModules()));
            keys.put("lora_target_linear", Boolean.toString(lora.targetAllLinear()));
            keys.put("peft_use_rslora", Boolean.toString(lora.useRslora()));
            if (lora.quantized()) {
                keys.put("bnb_4bit", String.valueOf(lora.quantization()));
            }
        } else {
            keys.put("adapter", "full");
        }
        keys.put("datasets", datasetIdentity);
        // the train/eval split: another fraction moves rows between the two, and the data order with them
        keys.put("val_set_size", Double.toString(recipe.data().valSetSize()));
        // checkpoints of one objective are not a starting point for another (DPO's reference, GRPO's groups)
        keys.put("rl", recipe.objective().key());
        keys.put("sequence_len", Integer.toString(recipe.training().sequenceLen()));
        keys.put("sample_packing", Boolean.toString(recipe.training().samplePacking()));
        keys.put("micro_batch_size", String.valueOf(recipe.batch().microBatchSize()));
        keys.put("train_on_inputs", Boolean.toString(recipe.data().trainOnInputs()));
        keys.put("chat_template", String.valueOf(recipe.model().chatTemplate()));
        // SGD keeps no state that AdamW could continue from, nor uses AdamW's moments; only when set, so checkpoints
        // of the AdamW spellings (one update, one state) stay resumable across them
        if (recipe.training().optimizer() == Optimizer.SGD) {
            keys.put("optimizer", "sgd");
        }
        // which rows are trained and in what order (shards, dedup, curriculum); only when set, so checkpoints of
        // recipes that set none of them stay resumable
        if (!recipe.data().selection().equals(DataSelection.DEFAULTS)) {
            keys.put("data_selection", recipe.data().selection().toString());
        }
        return Map.copyOf(keys);
    }

    /**
     * Values a resumed run may change, and continues with, but never silently: a resume that changes one says so
     * (the loss curve after it is another experiment's).
     */
    public static Map<String, String> adjustable(Recipe recipe) {
        Map<String, String> values = new TreeMap<>();
        values.put("learning_rate", Double.toString(recipe.training().learningRate()));
        values.put("lr_scheduler", String.valueOf(recipe.training().lrScheduler()));
        values.put("weight_decay", Double.toString(recipe.training().weightDecay()));
        values.put("max_grad_norm", Double.toString(recipe.training().maxGradNorm()));
        if (recipe.adapter() instanceof AdapterSpec.Lora lora) {
            values.put("lora_dropout", Double.toString(lora.dropout()));
        }
        return values;
    }
}
