package dev.finetune.trainers.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class TokenizerTest {
    static final Path STORIES = Path.of("..", "configs", "models", "stories260K");
    static Tokenizer tokenizer;

    @BeforeAll
    static void load() {
        tokenizer = Tokenizer.load(STORIES);
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    @Test
    void idsOfEveryReferencePromptMatch() throws Exception {
        JsonObject reference = JsonParser.parseString(Files.readString(STORIES.resolve("reference.json"))).getAsJsonObject();
        int prompts = 0;
        for (JsonElement element : reference.getAsJsonArray("prompts")) {
            JsonObject prompt = element.getAsJsonObject();
            int[] expected = ints(prompt, "prompt_ids");
            assertArrayEquals(expected, tokenizer.encode(prompt.get("prompt_text").getAsString(), true),
                    prompt.get("prompt_text").getAsString());
            prompts++;
        }
        assertEquals(3, prompts);
    }

    @Test
    void decodeReproducesTheReferenceTexts() throws Exception {
        JsonObject reference = JsonParser.parseString(Files.readString(STORIES.resolve("reference.json"))).getAsJsonObject();
        for (JsonElement element : reference.getAsJsonArray("prompts")) {
            JsonObject prompt = element.getAsJsonObject();
            int[] promptIds = ints(prompt, "prompt_ids");
            int[] generated = ints(prompt, "generated_ids");
            int[] all = new int[promptIds.length + generated.length];
            System.arraycopy(promptIds, 0, all, 0, promptIds.length);
            System.arraycopy(generated, 0, all, promptIds.length, generated.length);
            assertEquals(prompt.get("full_text").getAsString(), tokenizer.decode(all, true));
            assertEquals(prompt.get("prompt_text").getAsString(), tokenizer.decode(promptIds, true));
        }
    }

    @Test
    void specialTokensComeFromTheConfigFiles() {
        Tokenizer.SpecialTokens special = tokenizer.special();
        assertEquals("<s>", special.bos());
        assertEquals(1, special.bosId());
        assertEquals("</s>", special.eos());
        assertEquals(2, special.eosId());
        assertEquals("<unk>", special.unk());
        assertEquals(0, special.unkId());
        assertNull(special.pad());
        assertEquals(-1, special.padId());
        assertNull(tokenizer.chatTemplate());
    }

    @Test
    void bosOnlyWhenAskedAndSpecialTokensInTextAreRecognised() {
        assertEquals(1, tokenizer.encode("Once upon a time", true)[0]);
        assertTrue(tokenizer.encode("Once upon a time", false)[0] != 1);
        int[] ids = tokenizer.encode("The end.</s>", false);
        assertEquals(2, ids[ids.length - 1]);
        assertEquals("The end.</s>", tokenizer.decode(ids, false));
        assertEquals("The end.", tokenizer.decode(ids, true));
    }

    @Test
    void longTextIsNeitherTruncatedNorPadded() {
        String text = "Tom and Lily went to the park and played with a big red ball. ".repeat(400);
        int[] ids = tokenizer.encode(text, false);
        assertTrue(ids.length > 4 * 512, "got " + ids.length + " tokens");
        assertEquals(text.strip(), tokenizer.decode(ids, true).strip());
        assertEquals(tokenizer.encode("Tom and Lily", false).length, tokenizer.encode("Tom and Lily", false).length);
        int[] single = tokenizer.encode("Tom", false);
        assertTrue(single.length <= 2, "no padding: " + single.length);
    }

    @Test
    void spansPointIntoTheJavaStringEvenPastNonAsciiText() {
        String text = "Sue said: \"héllo 😀 wörld\" and ran.";
        Tokenizer.Encoded encoded = tokenizer.encodeWithSpans(text);
        assertArrayEquals(tokenizer.encode(text, false), encoded.ids());
        int last = encoded.ids().length - 1;
        assertEquals(text.length(), encoded.end()[last]);
        // Were code points taken for UTF-16 units, every span after the emoji would sit one char early.
        assertEquals(text.length() - 1, encoded.start()[last]);
        int previousEnd = 0;
        boolean[] covered = new boolean[text.length()];
        for (int i = 0; i < encoded.ids().length; i++) {
            assertTrue(encoded.start()[i] >= previousEnd - 2 && encoded.start()[i] <= encoded.end()[i], "token " + i);
            previousEnd = encoded.end()[i];
            for (int c = encoded.start()[i]; c < encoded.end()[i]; c++) {
                covered[c] = true;
            }
        }
        for (int c = 0; c < text.length(); c++) {
            assertTrue(covered[c] || text.charAt(c) == ' ', "char " + c + " '" + text.charAt(c) + "' has a token");
        }
    }

    static int[] ints(JsonObject object, String key) {
        return object.getAsJsonArray(key).asList().stream().mapToInt(JsonElement::getAsInt).toArray();
    }
}
