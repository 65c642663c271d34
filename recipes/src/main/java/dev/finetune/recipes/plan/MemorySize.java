package dev.finetune.recipes.plan;

import dev.finetune.recipes.UserError;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Memory sizes as users write them. */
public final class MemorySize {

    private static final Pattern SIZE = Pattern.compile("([0-9]+(?:\\.[0-9]+)?)\\s*([A-Za-z]+)?");

    private MemorySize() {}

    /**
     * Parses a memory size: {@code 80GiB}, {@code 80G} (also GiB), {@code 40 GB} (10⁹ bytes), {@code 512MiB}, or plain
     * bytes; the same reading as the recipe's {@code hardware.gpu_memory}. A card sold as "80 GB" holds 80 GiB.
     */
    public static long parse(String text, String where) {
        Matcher m = SIZE.matcher(text.strip());
        if (!m.matches()) {
            throw new UserError(where, "not a memory size: '" + text + "'", "write it like 80GiB, 24GiB or 40GB");
        }
        double value = Double.parseDouble(m.group(1));
        String unit = m.group(2) == null ? "" : m.group(2).toLowerCase(Locale.ROOT);
        double scale = switch (unit) {
            case "", "b" -> 1;
            case "kb" -> 1e3;
            case "k", "kib" -> 1L << 10;
            case "mb" -> 1e6;
            case "m", "mib" -> 1L << 20;
            case "gb" -> 1e9;
            case "g", "gib" -> 1L << 30;
            case "tb" -> 1e12;
            case "t", "tib" -> 1L << 40;
            default -> throw new UserError(where, "unknown memory unit '" + m.group(2) + "' in '" + text + "'",
                    "use GiB, GB, MiB or MB");
        };
        if (value <= 0) {
            throw new UserError(where, "memory size must be positive, got '" + text + "'", "e.g. 80GiB");
        }
        return Math.round(value * scale);
    }

}
