package dev.finetune.recipes;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The one table of recipe keys ({@code recipe-keys.tsv}): for every key Axolotl's schema knows, plus our own
 * additions, its type, default, a one-line doc and what finetune does with it. Nested keys are written
 * {@code parent.child}, keys of list items {@code parent[].child}.
 */
public final class RecipeKeys {

    public enum Status {
        /** Read into {@link Recipe}. */
        SUPPORTED,
        /** Accepted with a warning: it does not change what is trained (logging, kernels, runtime plumbing). */
        IGNORED,
        /** Recognised, but finetune cannot do it: an error when the key is enabled (not null/false/0/empty). */
        UNSUPPORTED,
        /** Rejected by Axolotl itself. */
        REMOVED,
        /** An old name: read as {@link Key#target()} with a warning. */
        RENAMED,
        /**
         * Defined by an earlier Axolotl, dropped silently by today's: ignored with a warning, as Axolotl does, unless a
         * current key is a typo's distance away (then it is more likely a misspelling of that key).
         */
        LEGACY,
        /** Not an Axolotl key, but common enough in real recipes that we carry a specific suggestion. */
        UNKNOWN
    }

    /**
     * @param defaultValue the default as written in the table: empty for none, or per objective where the objectives
     *     differ ({@code dpo=0.1; grpo=0.0}: read it with {@link #defaultFor})
     * @param note the doc line; for ignored/unsupported/removed/unknown keys the reason or the fix
     */
    public record Key(String name, String type, String defaultValue, Status status, String target, String note) {

        /** Whether the default depends on the objective ({@code rl_beta}: TRL's DPO and GRPO differ). */
        public boolean scoped() {
            return defaultValue.contains("=");
        }

        /**
         * The default for a recipe of {@code objective} ({@code sft}, {@code dpo}, {@code grpo}: {@code
         * Recipe.Objective.key()}); empty when there is none for it.
         */
        public String defaultFor(String objective) {
            if (!scoped()) {
                return defaultValue;
            }
            for (String part : defaultValue.split(";")) {
                String[] pair = part.strip().split("=", 2);
                if (pair[0].strip().equals(objective)) {
                    return pair[1].strip();
                }
            }
            return "";
        }
    }

    private static final Map<String, Key> KEYS = load();

    private RecipeKeys() {}

    public static Key get(String name) {
        return KEYS.get(name);
    }

    public static Collection<Key> all() {
        return Collections.unmodifiableCollection(KEYS.values());
    }

    private static Map<String, Key> load() {
        Map<String, Key> keys = new LinkedHashMap<>();
        try (InputStream in = RecipeKeys.class.getResourceAsStream("recipe-keys.tsv")) {
            if (in == null) {
                throw new IllegalStateException("recipe-keys.tsv is missing from the recipes jar");
            }
            BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
            String line;
            boolean header = true;
            while ((line = reader.readLine()) != null) {
                if (line.startsWith("#") || line.isEmpty()) {
                    continue;
                }
                if (header) {
                    header = false;
                    continue;
                }
                String[] f = line.split("\t", -1);
                String status = f[3];
                String target = null;
                if (status.startsWith("renamed:")) {
                    target = status.substring("renamed:".length());
                    status = "renamed";
                }
                keys.put(f[0], new Key(f[0], f[1], f[2], Status.valueOf(status.toUpperCase(java.util.Locale.ROOT)),
                        target, f[4]));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return keys;
    }
}
