package dev.finetune.trainers.text;

import static dev.finetune.recipes.ChatTemplateNames.ALIASES;
import static dev.finetune.recipes.ChatTemplateNames.FALLBACK_PREFIX;
import static dev.finetune.recipes.ChatTemplateNames.JINJA;
import static dev.finetune.recipes.ChatTemplateNames.SHIPPED;
import static dev.finetune.recipes.ChatTemplateNames.TOKENIZER_DEFAULT;

import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.List;
import java.util.TreeSet;

/**
 * Picks the chat template a recipe asks for, with Axolotl's {@code chat_template:} meanings: {@code
 * tokenizer_default} (the model's own, an error when it has none), {@code tokenizer_default_fallback_NAME} (the
 * model's own, else built-in NAME), {@code jinja} (the text or file in {@code chat_template_jinja}), or a built-in
 * name.
 */
public final class ChatTemplates {
    private ChatTemplates() {}

    /** Every name {@link #resolve} accepts besides the tokenizer_default and jinja forms. */
    public static List<String> builtInNames() {
        TreeSet<String> names = new TreeSet<>(SHIPPED);
        names.addAll(ALIASES.keySet());
        return List.copyOf(names);
    }

    /**
     * The template for {@code choice} (null means {@code tokenizer_default}, as for Axolotl's chat_template
     * datasets). {@code where} names the recipe key for errors.
     */
    public static ChatTemplate resolve(String choice, String jinja, Tokenizer tokenizer, String where) {
        String name = choice == null || choice.isBlank() ? TOKENIZER_DEFAULT : choice.strip();
        if (jinja != null && !jinja.isBlank() && (choice == null || choice.isBlank())) {
            name = JINJA;
        }
        try {
            if (name.equals(JINJA)) {
                if (jinja == null || jinja.isBlank()) {
                    throw new UserError(where, "chat_template: jinja needs chat_template_jinja",
                            "set chat_template_jinja to the template text or to a .jinja file");
                }
                return new ChatTemplate(JINJA, readInlineOrFile(jinja, where), tokenizer.special());
            }
            if (name.equals(TOKENIZER_DEFAULT)) {
                if (tokenizer.chatTemplate() == null) {
                    throw new UserError(where, "chat_template is tokenizer_default but the model at "
                            + tokenizer.directory() + " has no chat template",
                            "name one, e.g. chat_template: chatml, or tokenizer_default_fallback_chatml");
                }
                return new ChatTemplate(TOKENIZER_DEFAULT, tokenizer.chatTemplate(), tokenizer.special());
            }
            if (name.startsWith(FALLBACK_PREFIX)) {
                if (tokenizer.chatTemplate() != null) {
                    return new ChatTemplate(TOKENIZER_DEFAULT, tokenizer.chatTemplate(), tokenizer.special());
                }
                name = name.substring(FALLBACK_PREFIX.length());
            }
            return builtIn(name, tokenizer.special(), where);
        } catch (TemplateException e) {
            throw new UserError(where, "chat template '" + name + "' cannot be used: " + e.getMessage(),
                    "choose a built-in (" + String.join(", ", builtInNames()) + ") or pass chat_template_jinja");
        }
    }

    /** A built-in template by name or alias, rendering with the given tokenizer's special tokens. */
    public static ChatTemplate builtIn(String name, Tokenizer.SpecialTokens special, String where) {
        String canonical = ALIASES.getOrDefault(name, name);
        if (!SHIPPED.contains(canonical)) {
            throw new UserError(where, "unknown chat template '" + name + "'",
                    "use one of " + String.join(", ", builtInNames()) + ", tokenizer_default, or jinja with chat_template_jinja");
        }
        String resource = "templates/" + canonical + ".jinja";
        try (InputStream in = ChatTemplates.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new IllegalStateException("built-in template missing from the jar: " + resource);
            }
            return new ChatTemplate(canonical, new String(in.readAllBytes(), StandardCharsets.UTF_8), special);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Axolotl's rule: chat_template_jinja is a file when such a file exists, else the template text itself. */
    private static String readInlineOrFile(String jinja, String where) {
        if (!jinja.contains("{") && !jinja.contains("\n")) {
            try {
                Path file = Path.of(jinja);
                if (Files.isRegularFile(file)) {
                    return Files.readString(file);
                }
                throw new UserError(where, "chat_template_jinja names no existing file: " + jinja,
                        "give the path of a .jinja file or the template text itself");
            } catch (InvalidPathException | IOException e) {
                throw new UserError(where, "cannot read chat_template_jinja " + jinja + ": " + e.getMessage(),
                        "give the path of a readable .jinja file or the template text itself");
            }
        }
        return jinja;
    }
}
