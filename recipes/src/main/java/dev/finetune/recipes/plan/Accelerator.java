package dev.finetune.recipes.plan;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Optional;

/**
 * A GPU model with its dense peaks ({@code accelerators.tsv}), for the time estimate.
 *
 * @param halfTflops bf16 tensor-core peak, fp16 on chips without bf16
 * @param fp32Tflops plain fp32 peak
 * @param bandwidthTbs memory bandwidth in TB/s
 */
public record Accelerator(String name, List<String> aliases, double halfTflops, double fp32Tflops, double memoryGib,
        double bandwidthTbs) {

    private static final List<Accelerator> TABLE = load();

    public static List<Accelerator> all() {
        return TABLE;
    }

    /** By name or alias, ignoring case and the separators people write differently ({@code h100_sxm}, {@code H100 SXM}). */
    public static Optional<Accelerator> lookup(String name) {
        String key = normal(name);
        return TABLE.stream().filter(a -> normal(a.name).equals(key) || a.aliases.stream().anyMatch(x -> normal(x).equals(key)))
                .findFirst();
    }

    public static List<String> names() {
        return TABLE.stream().map(Accelerator::name).toList();
    }

    private static String normal(String s) {
        return s.toLowerCase(Locale.ROOT).replaceAll("[\\s_-]", "").replaceFirst("^nvidia", "");
    }

    private static List<Accelerator> load() {
        List<Accelerator> out = new ArrayList<>();
        try (InputStream in = Accelerator.class.getResourceAsStream("accelerators.tsv")) {
            if (in == null) {
                throw new IllegalStateException("accelerators.tsv is missing from the recipes jar");
            }
            BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
            boolean header = true;
            for (String line; (line = reader.readLine()) != null; ) {
                if (line.startsWith("#") || line.isBlank()) {
                    continue;
                }
                if (header) {
                    header = false;
                    continue;
                }
                String[] f = line.split("\t", -1);
                out.add(new Accelerator(f[0], f[1].isEmpty() ? List.of() : List.of(f[1].split(",")), Double.parseDouble(f[2]),
                        Double.parseDouble(f[3]), Double.parseDouble(f[4]), Double.parseDouble(f[5])));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return List.copyOf(out);
    }
}
