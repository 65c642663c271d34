package dev.finetune.trainers.hub;

import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Bytes fetched over all files of one download: a bar with rate and ETA on a terminal, a log line every few seconds
 * otherwise (a job log gets the same numbers without the redraws).
 */
class DownloadProgress implements AutoCloseable {
    private static final Logger LOG = LogManager.getLogger(DownloadProgress.class);
    static final DownloadProgress NONE = new DownloadProgress("", 0, false);
    private static final long LINE_EVERY_NANOS = 5_000_000_000L;

    private final String name;
    private final long total;
    private final AtomicLong done = new AtomicLong();
    private final long started = System.nanoTime();
    private final ProgressBar bar;
    private volatile long lastLine = System.nanoTime();

    private DownloadProgress(String name, long total, boolean terminal) {
        this.name = name;
        this.total = total;
        this.bar = terminal ? new ProgressBarBuilder().setTaskName(name).setInitialMax(total / 1_000_000)
                .setUnit(" MB", 1).setStyle(ProgressBarStyle.COLORFUL_UNICODE_BLOCK).showSpeed()
                .setSpeedUnit(java.time.temporal.ChronoUnit.SECONDS).continuousUpdate().build() : null;
    }

    static DownloadProgress start(String name, long total) {
        LOG.info("fetching {}: {}", name, megabytes(total));
        return new DownloadProgress(name, total, System.console() != null);
    }

    void add(long bytes) {
        if (this == NONE) {
            return;
        }
        long now = done.addAndGet(bytes);
        if (bar != null) {
            bar.stepTo(now / 1_000_000);
        } else if (System.nanoTime() - lastLine > LINE_EVERY_NANOS) {
            lastLine = System.nanoTime();
            LOG.info(line(now));
        }
    }

    private String line(long now) {
        double seconds = Math.max(1e-9, (System.nanoTime() - started) / 1e9);
        double rate = now / seconds;
        long eta = rate > 0 ? (long) ((total - now) / rate) : -1;
        return String.format(Locale.ROOT, "fetching %s: %s of %s, %.1f MB/s, ETA %s", name, megabytes(now),
                megabytes(total), rate / 1e6, eta < 0 ? "?" : Duration.ofSeconds(eta).toString().substring(2).toLowerCase(Locale.ROOT));
    }

    private static String megabytes(long bytes) {
        return String.format(Locale.ROOT, "%.1f MB", bytes / 1e6);
    }

    @Override
    public void close() {
        if (this == NONE) {
            return;
        }
        if (bar != null) {
            bar.close();
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        LOG.info(String.format(Locale.ROOT, "fetched %s: %s in %.1f s (%.1f MB/s)", name, megabytes(done.get()),
                seconds, done.get() / 1e6 / Math.max(seconds, 1e-9)));
    }
}
