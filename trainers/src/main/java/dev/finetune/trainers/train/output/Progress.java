package dev.finetune.trainers.train.output;

import java.time.Duration;
import java.util.Locale;
import java.util.Map;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Training progress: a live bar on a terminal, plain log lines when output goes to a file or a pipe. Both show
 * the lines {@code metrics.jsonl} gets ({@code logging_steps}), as the Hugging Face Trainer prints its logs: the
 * bar moves every step, the numbers change (and a line is printed) only when a step is logged.
 */
public sealed interface Progress extends AutoCloseable {

    /**
     * @param logged the line written to {@code metrics.jsonl} for this step (the interval's means), or
     *     {@code null} when this step is not logged
     */
    void step(long step, Map<String, Object> logged);

    @Override
    void close();

    /** A bar when the JVM talks to a terminal, log lines otherwise. */
    static Progress forRun(long firstStep, long totalSteps) {
        return System.console() != null ? new Bar(firstStep, totalSteps) : new Lines(totalSteps);
    }

    /** Steps, the last logged loss and tokens/s, and the ETA, redrawn in place. */
    final class Bar implements Progress {
        private final ProgressBar bar;

        Bar(long firstStep, long totalSteps) {
            bar = new ProgressBarBuilder().setTaskName("train").setInitialMax(totalSteps)
                    .setStyle(ProgressBarStyle.COLORFUL_UNICODE_BLOCK).setUnit(" steps", 1)
                    .startsFrom(firstStep, Duration.ZERO).continuousUpdate().build();
        }

        @Override
        public void step(long step, Map<String, Object> logged) {
            bar.stepTo(step);
            if (logged != null && logged.get("loss") instanceof Number loss) {
                bar.setExtraMessage(String.format(Locale.ROOT, "loss %.4f, %.0f tok/s", loss.doubleValue(),
                        number(logged, "tokens_per_second")));
            }
        }

        @Override
        public void close() {
            bar.close();
        }
    }

    /** One Log4j line per logged step (every {@code logging_steps}, evaluations and the last step). */
    final class Lines implements Progress {
        private static final Logger LOG = LogManager.getLogger(Progress.class);
        private final long totalSteps;
        private final long started = System.nanoTime();

        public Lines(long totalSteps) {
            this.totalSteps = totalSteps;
        }

        @Override
        public void step(long step, Map<String, Object> logged) {
            if (logged == null || !(logged.get("loss") instanceof Number loss)) {
                return;
            }
            double elapsed = (System.nanoTime() - started) / 1e9;
            StringBuilder line = new StringBuilder(String.format(Locale.ROOT, "step %d/%d  loss %.4f", step,
                    totalSteps, loss.doubleValue()));
            if (logged.get("eval_loss") instanceof Number eval) {
                line.append(String.format(Locale.ROOT, "  eval_loss %.4f", eval.doubleValue()));
            }
            if (logged.get("grad_norm") instanceof Number norm) {
                line.append(String.format(Locale.ROOT, "  grad_norm %.4g", norm.doubleValue()));
            }
            if (logged.get("learning_rate") instanceof Number lr) {
                line.append(String.format(Locale.ROOT, "  lr %.3g", lr.doubleValue()));
            }
            line.append(String.format(Locale.ROOT, "  %.0f tok/s  elapsed %.0fs",
                    number(logged, "tokens_per_second"), elapsed));
            LOG.info(line.toString());
        }

        @Override
        public void close() {}
    }

    private static double number(Map<String, Object> line, String key) {
        return line.get(key) instanceof Number n ? n.doubleValue() : Double.NaN;
    }
}
