package dev.finetune.recipes;

import java.util.List;
import java.util.Map;

/**
 * Watching an evaluation metric, with the HF Trainer's meanings: {@code save_strategy: best} saves a checkpoint when
 * the metric improves, {@code early_stopping_patience} stops training after that many evaluations without
 * improvement, {@code load_best_model_at_end} ends the run with the best checkpoint's weights.
 *
 * @param metric {@code metric_for_best_model} without the {@code eval_} prefix ({@code loss} when not written)
 * @param greaterIsBetter {@code greater_is_better} (HF's default: true unless the metric is a loss)
 * @param patience {@code early_stopping_patience}, or {@code null}
 * @param loadAtEnd {@code load_best_model_at_end} (implied by early stopping, as Axolotl sets it)
 */
public record BestModel(String metric, boolean greaterIsBetter, Integer patience, boolean loadAtEnd) {

    /** The evaluation metrics each objective ({@code rl} key) writes, without the {@code eval_} prefix. */
    public static final Map<String, List<String>> METRICS = Map.of(
            "sft", List.of("loss"),
            "dpo", List.of("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
                    "logps/chosen", "logps/rejected", "logits/chosen", "logits/rejected"),
            "grpo", List.of("loss", "reward", "reward_std", "kl", "entropy"));

    /** The key of the metric in an evaluation's line of metrics.jsonl. */
    public String lineKey() {
        return "eval_" + metric;
    }

    /** Whether {@code value} improves on {@code best} ({@code NaN}: nothing yet), as HF's strict comparison. */
    public boolean improves(double value, double best) {
        return Double.isNaN(best) || (greaterIsBetter ? value > best : value < best);
    }
}
