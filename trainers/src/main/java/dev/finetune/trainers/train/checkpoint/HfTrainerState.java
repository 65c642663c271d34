package dev.finetune.trainers.train.checkpoint;

import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import java.util.List;
import java.util.Map;

/**
 * {@code trainer_state.json} in the Hugging Face Trainer's schema, so {@code TrainerState.load_from_json} reads a
 * checkpoint of ours and tools that plot {@code log_history} see our run. Exactly the dataclass's fields (an
 * unknown one is a TypeError there); our own resume state lives beside it in {@link CheckpointStore#STATE}.
 *
 * @param trainBatchSize the micro batch size, HF's {@code train_batch_size}
 * @param logHistory {@code metrics.jsonl}'s lines up to this step; a line holding both training and evaluation
 *     values becomes two entries, as HF logs them
 */
public record HfTrainerState(double epoch, long globalStep, long maxSteps, int loggingSteps, int evalSteps,
        int saveSteps, int trainBatchSize, double numTrainEpochs, long numInputTokensSeen, double totalFlos,
        List<JsonObject> logHistory) {

    public static final String FILE = "trainer_state.json";

    public String toJson() {
        JsonObject o = new JsonObject();
        o.add("best_global_step", JsonNull.INSTANCE);
        o.add("best_metric", JsonNull.INSTANCE);
        o.add("best_model_checkpoint", JsonNull.INSTANCE);
        o.addProperty("epoch", epoch);
        o.addProperty("eval_steps", evalSteps);
        o.addProperty("global_step", globalStep);
        o.addProperty("is_hyper_param_search", false);
        o.addProperty("is_local_process_zero", true);
        o.addProperty("is_world_process_zero", true);
        o.add("log_history", history());
        o.addProperty("logging_steps", loggingSteps);
        o.addProperty("max_steps", maxSteps);
        o.addProperty("num_input_tokens_seen", numInputTokensSeen);
        o.addProperty("num_train_epochs", numTrainEpochs);
        o.addProperty("save_steps", saveSteps);
        o.add("stateful_callbacks", statefulCallbacks());
        o.addProperty("total_flos", totalFlos);
        o.addProperty("train_batch_size", trainBatchSize);
        o.add("trial_name", JsonNull.INSTANCE);
        o.add("trial_params", JsonNull.INSTANCE);
        return new GsonBuilder().setPrettyPrinting().serializeNulls().serializeSpecialFloatingPointValues().create()
                .toJson(o) + "\n";
    }

    /**
     * The HF Trainer's {@code TrainerControl} state, all flags down: a Trainer continuing from our checkpoint
     * ({@code train(resume_from_checkpoint=...)}) updates this entry at its first save and fails with a KeyError
     * when it is missing. The Python worker writes the same (finetune_worker/hf_files.py).
     */
    static JsonObject statefulCallbacks() {
        JsonObject flags = new JsonObject();
        for (String flag : List.of("should_training_stop", "should_epoch_stop", "should_save", "should_evaluate",
                "should_log")) {
            flags.addProperty(flag, false);
        }
        JsonObject control = new JsonObject();
        control.add("args", flags);
        control.add("attributes", new JsonObject());
        JsonObject callbacks = new JsonObject();
        callbacks.add("TrainerControl", control);
        return callbacks;
    }

    private JsonArray history() {
        JsonArray entries = new JsonArray();
        for (JsonObject line : logHistory) {
            JsonObject train = new JsonObject();
            JsonObject eval = new JsonObject();
            for (Map.Entry<String, JsonElement> e : line.entrySet()) {
                String key = e.getKey();
                if (key.equals("step") || key.equals("epoch")) {
                    continue;
                }
                (key.startsWith("eval_") ? eval : train).add(key, e.getValue());
            }
            for (JsonObject entry : List.of(train, eval)) {
                if (entry.size() > 0) {
                    entry.add("epoch", line.has("epoch") ? line.get("epoch") : new JsonPrimitive(0));
                    entry.add("step", line.has("step") ? line.get("step") : new JsonPrimitive(0));
                    entries.add(entry);
                }
            }
        }
        return entries;
    }
}
