package dev.finetune.trainers.train.output;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code logging_steps}: the per-step lines of one logging interval folded into the one line the Hugging Face
 * Trainer would log for it. The loss and the objective's metrics are means over the interval's steps (HF
 * averages the loss since the last log, TRL its metrics); the learning rate, gradient norm, epoch, token count
 * and evaluation results are the last step's; peak memory is the interval's largest. A key only some of its steps
 * report (the first step's plan-vs-measured memory) is the mean over those.
 */
public final class LogWindow {
    private static final List<String> LAST = List.of("step", "epoch", "learning_rate", "grad_norm", "num_tokens");
    private final int every;
    private final Map<String, Double> sums = new LinkedHashMap<>();
    private final Map<String, Integer> counts = new LinkedHashMap<>();
    private Map<String, Object> last;

    /** @param every {@code logging_steps}, at least 1 */
    public LogWindow(int every) {
        this.every = Math.max(1, every);
    }

    /** Adds one step's line; returns the line to write now, or {@code null} while the interval is still open. */
    public Map<String, Object> add(long step, long totalSteps, Map<String, Object> line) {
        last = line;
        line.forEach((key, value) -> {
            if (value instanceof Number n && !LAST.contains(key) && !key.startsWith("eval_")) {
                double v = n.doubleValue();
                if (key.equals("peak_memory_mb")) {
                    sums.merge(key, v, Math::max);
                } else {
                    sums.merge(key, v, Double::sum);
                }
                counts.merge(key, 1, Integer::sum);
            }
        });
        boolean evaluated = line.keySet().stream().anyMatch(k -> k.startsWith("eval_"));
        if (step % every != 0 && step != totalSteps && !evaluated) {
            return null;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        line.forEach((key, value) -> {
            Double sum = sums.get(key);
            out.put(key, sum == null ? value : key.equals("peak_memory_mb") ? sum : sum / counts.get(key));
        });
        // a key only an earlier step of the interval had (the first step's plan-vs-measured memory) is kept, as
        // the mean of the steps that had it
        sums.forEach((key, sum) -> out.putIfAbsent(key, key.equals("peak_memory_mb") ? sum : sum / counts.get(key)));
        sums.clear();
        counts.clear();
        return out;
    }
}
