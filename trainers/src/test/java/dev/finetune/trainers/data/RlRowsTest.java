package dev.finetune.trainers.data;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.data.GrpoPrompt;
import dev.finetune.trainers.data.PreferencePair;
import dev.finetune.trainers.text.Tokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Preference pairs and GRPO prompts from real files, for each DPO type we read. */
class RlRowsTest {
    static Tokenizer tokenizer;

    @BeforeAll
    static void load() {
        tokenizer = Tokenizer.load(DataPipelineTest.STORIES);
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    private static DatasetSpec spec(Path file, String type) {
        return new DatasetSpec(file, DatasetType.named(type), DataDefaults.FIELD, null, null, DataDefaults.ROLES_TO_TRAIN,
                DataDefaults.TRAIN_ON_EOS, null, "recipe.yaml:4:5", null, "train", null, null);
    }

    private static long[] ids(String text, boolean bos) {
        return Arrays.stream(tokenizer.encode(text, bos)).asLongStream().toArray();
    }

    private static long[] withEos(long[] ids) {
        long[] out = Arrays.copyOf(ids, ids.length + 1);
        out[ids.length] = DataPipelineTest.EOS;
        return out;
    }

    private static PreferencePair one(Path dir, String type, String row) throws IOException {
        Path file = dir.resolve(type + ".jsonl");
        Files.writeString(file, row + "\n");
        return RlRows.preferences(List.of(spec(file, type)), DataDefaults.options(), tokenizer).train().get(0);
    }

    @Test
    void plainRowsAreConcatenatedAsTrlDoesWithEosAfterEachAnswer(@TempDir Path dir) throws IOException {
        PreferencePair pair = one(dir, "passthrough",
                "{\"prompt\": \"Tom saw a dog.\", \"chosen\": \" He smiled.\", \"rejected\": \" He cried.\"}");
        assertArrayEquals(ids("Tom saw a dog.", true), pair.prompt());
        assertArrayEquals(withEos(after("Tom saw a dog.", "Tom saw a dog. He smiled.")), pair.chosen());
        assertArrayEquals(withEos(after("Tom saw a dog.", "Tom saw a dog. He cried.")), pair.rejected());
    }

    /** The tokens of {@code full} after those of {@code prompt}: how TRL cuts an answer out. */
    private static long[] after(String prompt, String full) {
        long[] all = ids(full, true);
        return Arrays.copyOfRange(all, ids(prompt, true).length, all.length);
    }

    @Test
    void anAnswerThatContinuesAWordIsTokenizedTogetherWithThePrompt(@TempDir Path dir) throws IOException {
        // SentencePiece marks a word start; tokenized alone, "ly" would get one the text does not have
        PreferencePair pair = one(dir, "passthrough",
                "{\"prompt\": \"Once upon a time\", \"chosen\": \"ly\", \"rejected\": \" there\"}");
        String chosen = tokenizer.decode(Arrays.stream(pair.chosen()).mapToInt(Math::toIntExact).toArray(), true);
        long[] alone = ids("ly", false);
        long[] joined = Arrays.copyOf(pair.chosen(), pair.chosen().length - 1);
        assertTrue(!Arrays.equals(alone, joined), "the separately tokenized answer differs: " + Arrays.toString(alone));
        assertArrayEquals(ids("Once upon a timely", true), concat(pair.prompt(), joined), chosen);
    }

    private static long[] concat(long[] a, long[] b) {
        long[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    @Test
    void chatmlIntelRendersSystemAndQuestionAsAChatmlPrompt(@TempDir Path dir) throws IOException {
        PreferencePair pair = one(dir, "chatml.intel", "{\"system\": \"Be kind.\", \"question\": \"Hi?\", "
                + "\"chosen\": \"Hello!\", \"rejected\": \"Go away.\"}");
        assertArrayEquals(ids("<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
                + "<|im_start|>assistant\n", true), pair.prompt());
        String chosen = tokenizer.decode(Arrays.stream(pair.chosen()).mapToInt(Math::toIntExact).toArray(), false);
        assertTrue(chosen.startsWith("Hello!<|im_end|>"), chosen);
    }

    @Test
    void llama3PromptPairsRenderLlama3Headers(@TempDir Path dir) throws IOException {
        PreferencePair pair = one(dir, "llama3.prompt_pairs", "{\"prompt\": \"Hi?\", \"chosen\": \"Hello!\", "
                + "\"rejected\": \"No.\"}");
        String prompt = tokenizer.decode(Arrays.stream(pair.prompt()).mapToInt(Math::toIntExact).toArray(), false);
        assertTrue(prompt.contains("<|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|>"
                + "<|start_header_id|>assistant<|end_header_id|>\n\n"), prompt);
        String chosen = tokenizer.decode(Arrays.stream(pair.chosen()).mapToInt(Math::toIntExact).toArray(), false);
        assertTrue(chosen.startsWith("Hello!<|eot_id|>"), chosen);
    }

    @Test
    void conversationalRowsUseTheChatTemplate(@TempDir Path dir) throws IOException {
        Path file = dir.resolve("chat.jsonl");
        Files.writeString(file, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi?\"}], "
                + "\"chosen\": {\"role\": \"assistant\", \"content\": \"Hello!\"}, "
                + "\"rejected\": {\"role\": \"assistant\", \"content\": \"No.\"}}\n");
        Path trlFile = dir.resolve("trl.jsonl");
        Files.writeString(trlFile, "{\"prompt\": [{\"role\": \"user\", \"content\": \"Hi?\"}], "
                + "\"chosen\": [{\"role\": \"assistant\", \"content\": \"Hello!\"}], "
                + "\"rejected\": [{\"role\": \"assistant\", \"content\": \"No.\"}]}\n");
        DataOptions chatml = DataDefaults.options().withChatTemplate("chatml", null);
        PreferencePair typed = RlRows.preferences(List.of(spec(file, "chat_template.default")), chatml, tokenizer)
                .train().get(0);
        PreferencePair trl = RlRows.preferences(List.of(spec(trlFile, "passthrough")), chatml, tokenizer).train().get(0);
        // Axolotl renders its types to text, which TRL tokenizes with BOS and ends with EOS; TRL's own conversational
        // rows go through apply_chat_template, which adds neither
        String prompt = "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n";
        assertArrayEquals(ids(prompt, true), typed.prompt());
        assertArrayEquals(ids(prompt, false), trl.prompt());
        assertArrayEquals(withEos(trl.chosen()), typed.chosen());
        String chosen = tokenizer.decode(Arrays.stream(trl.chosen()).mapToInt(Math::toIntExact).toArray(), false);
        assertTrue(chosen.startsWith("Hello!<|im_end|>"), chosen);
    }

    @Test
    void grpoPromptsKeepTheRowForRewardsAndHoldOutTheValidationShare(@TempDir Path dir) throws IOException {
        Path file = dir.resolve("prompts.jsonl");
        StringBuilder rows = new StringBuilder();
        for (int i = 0; i < 10; i++) {
            rows.append("{\"prompt\": \"Story ").append(i).append(".\", \"answer\": \"").append(i).append("\"}\n");
        }
        Files.writeString(file, rows);
        RlRows.Split<GrpoPrompt> split = RlRows.prompts(List.of(spec(file, "passthrough")),
                DataDefaults.options().withValSetSize(0.2), tokenizer);
        assertEquals(8, split.train().size());
        assertEquals(2, split.eval().size());
        GrpoPrompt first = split.train().get(0);
        assertEquals(first.text().substring(6, 7), first.fields().get("answer").getAsString());
        assertArrayEquals(ids(first.text(), true), first.ids());
    }

    @Test
    void longRowsFollowExcessLengthStrategyAndBrokenRowsCanBeSkipped(@TempDir Path dir) throws IOException {
        Path file = dir.resolve("long.jsonl");
        Files.writeString(file, "{\"prompt\": \"Tom\", \"chosen\": \" ran and ran and ran far far far away from home to the big hill\", "
                + "\"rejected\": \" sat\"}\n{\"prompt\": \"Sue\"}\n{\"prompt\": \"Sue\", \"chosen\": \" hi\", "
                + "\"rejected\": \" no\"}\n");
        DataOptions options = DataDefaults.options().withSequenceLen(12).withSkipInvalidRows(true);
        RlRows.Split<PreferencePair> dropped = RlRows.preferences(List.of(spec(file, "passthrough")), options, tokenizer);
        assertEquals(1, dropped.train().size());
        assertEquals(1, dropped.tooLong());
        assertEquals(1, dropped.skipped());
        RlRows.Split<PreferencePair> cut = RlRows.preferences(List.of(spec(file, "passthrough")),
                options.withExcessLength(dev.finetune.recipes.Recipe.ExcessLength.TRUNCATE), tokenizer);
        assertEquals(2, cut.train().size());
        assertTrue(cut.train().stream().allMatch(p -> p.length() <= 12), "answers cut to fit, prompt whole");
        UserError e = assertThrows(UserError.class, () -> RlRows.preferences(List.of(spec(file, "passthrough")),
                options.withExcessLength(dev.finetune.recipes.Recipe.ExcessLength.RAISE), tokenizer));
        assertTrue(e.oneLine().contains("long.jsonl:1") && e.oneLine().contains("sequence_len 12"), e.oneLine());
    }

    @Test
    void aRowWithoutTheTypesFieldsNamesItsLocation(@TempDir Path dir) throws IOException {
        Path file = dir.resolve("bad.jsonl");
        Files.writeString(file, "{\"prompt\": \"x\", \"chosen\": \"y\"}\n");
        UserError e = assertThrows(UserError.class, () -> RlRows.preferences(List.of(spec(file, "chatml.prompt_pairs")),
                DataDefaults.options(), tokenizer));
        assertTrue(e.oneLine().contains("bad.jsonl:1") && e.oneLine().contains("'rejected'"), e.oneLine());
    }
}
