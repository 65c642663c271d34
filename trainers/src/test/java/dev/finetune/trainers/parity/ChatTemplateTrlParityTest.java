package dev.finetune.trainers.parity;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.trainers.data.DataDefaults;
import dev.finetune.trainers.data.DataPipeline;
import dev.finetune.trainers.data.Example;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.text.Tokenizer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Our chat-template path against transformers' {@code apply_chat_template} with Qwen2.5's template, and what we
 * train against what TRL's SFTTrainer trains with {@code assistant_only_loss} (its generation-tagged copy of the
 * template, {@code return_assistant_tokens_mask}), with a tokenizer that knows Qwen's turn tokens and ends turns with
 * {@code <|im_end|>} as Qwen2.5-Instruct's does. The tokens are the same; TRL also trains two white-space tokens
 * per assistant turn: the newline after {@code <|im_start|>assistant} (with a SentencePiece tokenizer, the
 * word-start piece in front of the content) and the newline after {@code <|im_end|>}. We leave both out, as
 * Axolotl does: the first belongs to the prompt every generation is given ({@code add_generation_prompt} ends
 * with it), and the second comes after the end-of-turn token, where generation has already stopped.
 */
class ChatTemplateTrlParityTest {
    private static final String MESSAGES = """
            [{"role": "system", "content": "You are kind."},
             {"role": "user", "content": "Tell me a story."},
             {"role": "assistant", "content": "Once upon a time there was a cat."},
             {"role": "user", "content": "And then?"},
             {"role": "assistant", "content": "The cat slept."}]""";

    @Test
    @Timeout(600)
    void sameTokensAndTrlTrainsTwoMoreWhiteSpaceTokensPerAssistantTurn(@TempDir Path dir) throws Exception {
        Path messages = dir.resolve("messages.json");
        Files.writeString(messages, MESSAGES);
        Path data = dir.resolve("chat.jsonl");
        Files.writeString(data, "{\"messages\": " + MESSAGES.replace("\n", "") + "}\n");
        Path modelDir = Stories260KReference.modelDir();
        Path qwenLike = dir.resolve("tokenizer");
        PythonStack.runScript(PythonStack.script("/parity/chat_mask_trl.py", dir), dir, modelDir.toString(),
                messages.toString(), dir.resolve("trl.json").toString(), qwenLike.toString());
        JsonObject trl = JsonParser.parseString(Files.readString(dir.resolve("trl.json"))).getAsJsonObject();
        int[] trlIds = ints(trl.getAsJsonArray("input_ids"));
        int[] trlMask = ints(trl.getAsJsonArray("assistant_masks"));

        Example ours;
        List<String> pieces = new ArrayList<>();
        try (Tokenizer tokenizer = Tokenizer.load(qwenLike)) {
            DatasetSpec spec = new DatasetSpec(data, DatasetType.CHAT_TEMPLATE, DataDefaults.FIELD, null, null,
                    DataDefaults.ROLES_TO_TRAIN, DataDefaults.TRAIN_ON_EOS, "qwen_25",
                    "recipe.yaml:4:5", null, "train", null, null);
            ours = DataPipeline.prepare(List.of(spec), DataDefaults.options().withSamplePacking(false), tokenizer)
                    .train().get(0);
            for (int id : trlIds) {
                pieces.add(tokenizer.decode(new int[] {id}, false));
            }
        }
        int[] ids = ours.inputIds();
        // transformers' apply_chat_template adds no BOS; a tokenizer that has one gets it from us as from Axolotl
        int offset = ids.length == trlIds.length + 1 ? 1 : 0;
        assertArrayEquals(trlIds, Arrays.copyOfRange(ids, offset, ids.length), "the rendered conversation's tokens");
        List<Integer> onlyTrl = new ArrayList<>();
        for (int i = 0; i < trlIds.length; i++) {
            // our labels sit on the token they predict, as Example stores them
            boolean trained = ours.labels()[i + offset] != Example.IGNORE;
            assertTrue(!trained || trlMask[i] == 1, "we train token " + i + " which TRL does not");
            if (trlMask[i] == 1 && !trained) {
                onlyTrl.add(i);
            }
        }
        assertEquals(4, onlyTrl.size(), "two assistant turns, two white-space tokens each: " + onlyTrl);
        assertTrue(onlyTrl.stream().allMatch(i -> i > 0 && i + 1 < trlIds.length), onlyTrl.toString());
        for (int i : onlyTrl) {
            assertTrue(pieces.get(i).isBlank(), "token " + i + " is white space: '" + pieces.get(i) + "'");
        }
    }

    private static int[] ints(JsonArray array) {
        int[] out = new int[array.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = array.get(i).getAsInt();
        }
        return out;
    }
}
