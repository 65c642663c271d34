package dev.finetune.recipes.plan;

import java.util.Locale;

/** Byte quantities as the plan prints them. */
final class Bytes {
    static final double GIB = 1024.0 * 1024 * 1024;

    private Bytes() {}

    /** GiB with one decimal. */
    static String gib(long bytes) {
        return String.format(Locale.ROOT, "%.1f", bytes / GIB);
    }

    /** A count in B (10⁹) or M (10⁶), for parameter numbers. */
    static String count(long n) {
        if (n >= 1_000_000_000L) {
            return String.format(Locale.ROOT, "%.2f B", n / 1e9);
        }
        if (n >= 1_000_000L) {
            return String.format(Locale.ROOT, "%.1f M", n / 1e6);
        }
        return String.format(Locale.ROOT, "%,d", n);
    }
}
