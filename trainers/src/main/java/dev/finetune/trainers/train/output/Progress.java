package dev.finetune.trainers.train.output;

import java.time.Duration;
import java.util.Locale;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/** Training progress: a live bar on a terminal, plain log lines when output goes to a file or a pipe. */
public sealed interface Progress extends AutoCloseable {

    void step(long step, double loss, double tokensPerSecond);

    @Override
    void close();

    /** A bar when the JVM talks to a terminal, log lines otherwise. */
    static Progress forRun(long firstStep, long totalSteps) {
        return System.console() != null ? new Bar(firstStep, totalSteps) : new Lines(totalSteps);
    }

    /** Steps, loss, tokens/s and ETA, redrawn in place. */
    final class Bar implements Progress {
        private final ProgressBar bar;

        Bar(long firstStep, long totalSteps) {
            bar = new ProgressBarBuilder().setTaskName("train").setInitialMax(totalSteps)
                    .setStyle(ProgressBarStyle.COLORFUL_UNICODE_BLOCK).setUnit(" steps", 1)
                    .startsFrom(firstStep, Duration.ZERO).continuousUpdate().build();
        }

        @Override
        public void step(long step, double loss, double tokensPerSecond) {
            bar.stepTo(step);
            bar.setExtraMessage(String.format(Locale.ROOT, "loss %.4f, %.0f tok/s", loss, tokensPerSecond));
        }

        @Override
        public void close() {
            bar.close();
        }
    }

    /** One Log4j line per step for short runs, about 50 lines in all for long ones, plus the last step. */
    final class Lines implements Progress {
        private static final Logger LOG = LogManager.getLogger(Progress.class);
        private final long totalSteps;
        private final long every;
        private final long started = System.nanoTime();

        Lines(long totalSteps) {
            this.totalSteps = totalSteps;
            this.every = Math.max(1, totalSteps / 50);
        }

        @Override
        public void step(long step, double loss, double tokensPerSecond) {
            if (step % every == 0 || step == totalSteps) {
                double elapsed = (System.nanoTime() - started) / 1e9;
                LOG.info(String.format(Locale.ROOT, "step %d/%d  loss %.4f  %.0f tok/s  elapsed %.0fs",
                        step, totalSteps, loss, tokensPerSecond, elapsed));
            }
        }

        @Override
        public void close() {}
    }
}
