package dev.finetune.trainers.families;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.parity.PythonStack;
import dev.finetune.trainers.text.ChatTemplate;
import dev.finetune.trainers.text.ChatTemplates;
import dev.finetune.trainers.text.Message;
import dev.finetune.trainers.text.Tokenizer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Axolotl's named templates of the families give, token for token, what transformers' {@code apply_chat_template}
 * gives with the model's own template (the originals TRL ships): for each, a tokenizer made by the test from
 * stories260K's with the family's turn markers and BOS/EOS. The model's own template, read from the saved tokenizer
 * ({@code tokenizer_default}) and rendered by our Jinja, is checked against the same tokens.
 */
class ChatTemplateFamiliesTest {
    static final List<List<Message>> CONVERSATIONS = List.of(
            List.of(new Message("system", "You are terse."), new Message("user", "Hi there"),
                    new Message("assistant", "Hello."), new Message("user", "Bye"), new Message("assistant", "Goodbye.")),
            List.of(new Message("user", " Spaces around \n"), new Message("assistant", "\nNew line first, then é")),
            List.of(new Message("user", "One question")),
            List.of(new Message("system", ""), new Message("user", "Why?"),
                    new Message("assistant", "<think>\nBecause.\n</think>\n\nIt is so.")));

    @Test
    void namedTemplatesTokenizeAsTheModelsOwnDo(@TempDir Path work) throws Exception {
        PythonStack.runScript(PythonStack.script("/families/chat_templates.py", work), work, work.toString(),
                Stories260KReference.modelDir().toString());
        JsonObject expected = JsonParser.parseString(Files.readString(work.resolve("expected.json"))).getAsJsonObject();
        List<String> differences = new ArrayList<>();
        int compared = 0;
        for (Map.Entry<String, JsonElement> family : expected.entrySet()) {
            String name = family.getKey();
            JsonArray renders = family.getValue().getAsJsonArray();
            try (Tokenizer tokenizer = Tokenizer.load(work.resolve(name))) {
                for (String choice : List.of(name, "tokenizer_default")) {
                    ChatTemplate template = ChatTemplates.resolve(choice, null, tokenizer, "chat_template");
                    for (int c = 0; c < CONVERSATIONS.size(); c++) {
                        for (int g = 0; g < 2; g++) {
                            JsonElement theirs = renders.get(2 * c + g);
                            String ours;
                            try {
                                ours = Arrays.toString(tokenizer.encodeWithSpans(template.render(CONVERSATIONS.get(c), g == 1)).ids());
                            } catch (RuntimeException e) {
                                ours = "ERROR";
                            }
                            String want = theirs.isJsonPrimitive() ? "ERROR" : Arrays.toString(ids(theirs.getAsJsonArray()));
                            compared++;
                            if (!want.equals(ours)) {
                                differences.add(name + " as " + choice + ", conversation " + c + (g == 1 ? " + generation prompt" : "")
                                        + "\n  transformers " + want + "\n  ours         " + ours);
                            }
                        }
                    }
                }
            }
        }
        System.out.println("chat templates: " + expected.size() + " families, " + compared + " tokenizations, "
                + differences.size() + " different");
        assertTrue(compared >= 100, "compared " + compared);
        assertEquals("", String.join("\n", differences));
    }

    private static int[] ids(JsonArray array) {
        return array.asList().stream().mapToInt(JsonElement::getAsInt).toArray();
    }
}
