package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * {@code docs/recipe-keys.md} is generated from {@code recipe-keys.tsv}, the one table of keys: this test renders it
 * and fails when the committed file differs, leaving the fresh one in {@code recipes/target/recipe-keys.md} to copy.
 */
class RecipeKeysDocTest {

    static final Path DOC = RecipeLoadingTest.repoRoot().resolve("docs/recipe-keys.md");

    /** The page, from the key table alone. */
    static String render() {
        StringBuilder s = new StringBuilder();
        s.append("# Recipe keys\n\n");
        s.append("<!-- Generated from recipes/src/main/resources/dev/finetune/recipes/recipe-keys.tsv by "
                + "RecipeKeysDocTest; edit the table, not this file. -->\n\n");
        s.append("Every key of Axolotl's schema, plus finetune's own (`base`, `hardware`, `backend`), and what finetune "
                + "does with it. Nested keys are written `parent.child`, keys of list items `parent[].child`. A default "
                + "written `dpo=0.1; grpo=0.0` depends on the objective. Any other key is an error with a "
                + "did-you-mean.\n\n");
        section(s, RecipeKeys.Status.SUPPORTED, "Supported", "read and acted on", true);
        section(s, RecipeKeys.Status.IGNORED, "Ignored with a warning",
                "accepted; they do not change what is trained here (logging integrations, speed-only kernels)", false);
        section(s, RecipeKeys.Status.UNSUPPORTED, "Unsupported",
                "an error when set to anything but off (null, false, 0 or empty), with what to use instead", false);
        section(s, RecipeKeys.Status.RENAMED, "Renamed", "read as the new name, with a warning", false);
        section(s, RecipeKeys.Status.REMOVED, "Removed", "rejected, as Axolotl rejects them", false);
        section(s, RecipeKeys.Status.LEGACY, "Legacy",
                "an earlier Axolotl defined them and today's drops them: ignored with a warning", false);
        section(s, RecipeKeys.Status.UNKNOWN, "Common mistakes",
                "not Axolotl keys, but frequent enough in real recipes to carry their own fix", false);
        return s.toString();
    }

    private static void section(StringBuilder s, RecipeKeys.Status status, String title, String what,
            boolean defaults) {
        List<RecipeKeys.Key> keys = RecipeKeys.all().stream().filter(k -> k.status() == status)
                .sorted(java.util.Comparator.comparing(RecipeKeys.Key::name)).toList();
        s.append("## ").append(title).append(" (").append(keys.size()).append(")\n\n").append(what).append(".\n\n");
        s.append(defaults ? "| key | type | default | meaning |\n|---|---|---|---|\n" : "| key | type | note |\n|---|---|---|\n");
        for (RecipeKeys.Key key : keys) {
            String note = key.status() == RecipeKeys.Status.RENAMED ? "now `" + key.target() + "`"
                    + (key.note().isEmpty() ? "" : "; " + key.note()) : key.note();
            s.append("| `").append(key.name()).append("` | ").append(cell(key.type())).append(" | ");
            if (defaults) {
                s.append(key.defaultValue().isEmpty() ? "" : "`" + key.defaultValue() + "`").append(" | ");
            }
            s.append(cell(note)).append(" |\n");
        }
        s.append('\n');
    }

    private static String cell(String text) {
        return text.replace("|", "\\|");
    }

    @Test
    void theCommittedPageIsTheTableRendered() throws IOException {
        String expected = render();
        String committed = Files.exists(DOC) ? Files.readString(DOC) : "";
        if (!committed.equals(expected)) {
            Path fresh = RecipeLoadingTest.repoRoot().resolve("recipes/target/recipe-keys.md");
            Files.createDirectories(fresh.getParent());
            Files.writeString(fresh, expected);
            assertEquals(expected, committed, "docs/recipe-keys.md is stale: cp " + fresh + " " + DOC);
        }
    }

    @Test
    void everySupportedKeyIsOnThePage() {
        String page = render();
        List<String> missing = RecipeKeys.all().stream().map(k -> "| `" + k.name() + "` |")
                .filter(row -> !page.contains(row)).collect(Collectors.toList());
        assertEquals(List.of(), missing, String.format(Locale.ROOT, "%d keys missing", missing.size()));
    }
}
