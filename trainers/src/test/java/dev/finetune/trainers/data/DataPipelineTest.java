package dev.finetune.trainers.data;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.DatasetType;
import dev.finetune.recipes.Recipe.ExcessLength;
import dev.finetune.recipes.TrainOnEos;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.sft.SftBatch;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class DataPipelineTest {
    static final Path STORIES = Path.of("..", "configs", "models", "stories260K");
    static Tokenizer tokenizer;
    static final int EOS = 2;

    @TempDir
    Path dir;

    @BeforeAll
    static void load() {
        tokenizer = Tokenizer.load(STORIES);
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    Path write(String name, String... lines) throws IOException {
        Path file = dir.resolve(name);
        Files.writeString(file, String.join("\n", lines) + "\n");
        return file;
    }

    static DatasetSpec spec(Path path, String type) {
        return new DatasetSpec(path, DatasetType.named(type), DataDefaults.FIELD, null, null, DataDefaults.ROLES_TO_TRAIN,
                DataDefaults.TRAIN_ON_EOS, null, "recipe.yaml:4:5", null, "train", null, null);
    }

    static DatasetSpec chat(Path path, String template, List<String> roles, TrainOnEos trainOnEos) {
        return new DatasetSpec(path, DatasetType.CHAT_TEMPLATE, DataDefaults.FIELD, null, null,
                roles != null ? roles : DataDefaults.ROLES_TO_TRAIN, trainOnEos != null ? trainOnEos : DataDefaults.TRAIN_ON_EOS,
                template, "recipe.yaml:4:5", null, "train", null, null);
    }

    static PreparedData prepare(DataOptions options, DatasetSpec... specs) {
        return DataPipeline.prepare(List.of(specs), options, tokenizer);
    }

    /** The text of each stretch of consecutive tokens that carry loss. */
    static List<String> runs(Example example) {
        List<String> runs = new ArrayList<>();
        int t = 0;
        while (t < example.length()) {
            if (example.labels()[t] == Example.IGNORE) {
                t++;
                continue;
            }
            int start = t;
            while (t < example.length() && example.labels()[t] != Example.IGNORE) {
                t++;
            }
            runs.add(tokenizer.decode(Arrays.copyOfRange(example.labels(), start, t), false));
        }
        return runs;
    }

    static int[] labelled(Example example) {
        return Arrays.stream(example.labels()).filter(l -> l != Example.IGNORE).toArray();
    }

    @Test
    void alpacaLearnsOnlyTheResponseAndItsEos() throws IOException {
        Path data = write("alpaca.jsonl",
                "{\"instruction\": \"Tell a story\", \"input\": \"about a cat\", \"output\": \"The cat sat.\"}",
                "{\"instruction\": \"Say hi\", \"output\": \"Hi!\"}");
        PreparedData prepared = prepare(DataDefaults.options(), spec(data, "alpaca"));
        Example withInput = prepared.train().get(0);
        // Axolotl's alpaca prompt, written out from its public definition.
        String prompt = "Below is an instruction that describes a task, paired with an input that provides further context."
                + " Write a response that appropriately completes the request.\n\n### Instruction:\nTell a story\n\n"
                + "### Input:\nabout a cat\n\n### Response:\n";
        int[] promptIds = tokenizer.encode(prompt, true);
        int[] responseIds = tokenizer.encode("The cat sat.", false);
        int[] expected = concat(promptIds, responseIds, new int[] {EOS});
        assertArrayEquals(expected, withInput.inputIds());
        assertArrayEquals(concat(responseIds, new int[] {EOS}), labelled(withInput));
        assertEquals(Example.IGNORE, withInput.labels()[promptIds.length - 1]);
        assertEquals("The cat sat.", tokenizer.decode(labelled(withInput), true));

        String noInputPrompt = "Below is an instruction that describes a task. Write a response that appropriately completes"
                + " the request.\n\n### Instruction:\nSay hi\n\n### Response:\n";
        Example withoutInput = prepared.train().get(1);
        assertArrayEquals(concat(tokenizer.encode(noInputPrompt, true), tokenizer.encode("Hi!", false), new int[] {EOS}),
                withoutInput.inputIds());

        PreparedData all = prepare(DataDefaults.options().withTrainOnInputs(true), spec(data, "alpaca"));
        assertArrayEquals(all.train().get(0).inputIds(), all.train().get(0).labels());
    }

    @Test
    void chatTemplateLearnsAssistantContentAndTurnEnds() throws IOException {
        Path data = write("chat.jsonl", "{\"messages\": ["
                + "{\"role\": \"system\", \"content\": \"Be kind.\"},"
                + "{\"role\": \"user\", \"content\": \"Where is Tom?\"},"
                + "{\"role\": \"assistant\", \"content\": \"In the park.\"},"
                + "{\"role\": \"user\", \"content\": \"Why?\"},"
                + "{\"role\": \"assistant\", \"content\": \"He likes the sun.\"}]}");
        Example turn = prepare(DataDefaults.options(), chat(data, "llama2", null, null)).train().get(0);
        String rendered = "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nWhere is Tom? [/INST] In the park. </s><s>[INST] Why? [/INST] He likes the sun. </s>";
        assertArrayEquals(tokenizer.encode(rendered, false), turn.inputIds());
        assertEquals(List.of("In the park.", "</s>", "He likes the sun.", "</s>"), runs(turn));

        Example last = prepare(DataDefaults.options(), chat(data, "llama2", null, TrainOnEos.LAST)).train().get(0);
        assertEquals(List.of("In the park.", "He likes the sun.", "</s>"), runs(last));
        assertEquals(EOS, last.labels()[last.length() - 1]);
        Example none = prepare(DataDefaults.options(), chat(data, "llama2", null, TrainOnEos.NONE)).train().get(0);
        assertEquals(List.of("In the park.", "He likes the sun."), runs(none));
        Example allEos = prepare(DataDefaults.options(), chat(data, "llama2", List.of("user"), TrainOnEos.ALL)).train().get(0);
        assertEquals(List.of("Where is Tom?", "</s>", "Why?", "</s>"), runs(allEos));

        Example users = prepare(DataDefaults.options(), chat(data, "llama2", List.of("user"), TrainOnEos.NONE)).train().get(0);
        assertEquals(List.of("Where is Tom?", "Why?"), runs(users));

        Example everything = prepare(DataDefaults.options().withTrainOnInputs(true), chat(data, "llama2", null, TrainOnEos.NONE)).train().get(0);
        // The system prompt sits inside the first [INST] block, and only the contents are learned, never the template.
        assertEquals(List.of("Be kind.", "Where is Tom?", "In the park.", "Why?", "He likes the sun."), runs(everything));
    }

    @Test
    void chatTemplateFieldMappingsAliasesAndSystemField() throws IOException {
        Path data = write("sharegpt.jsonl", "{\"system\": \"Be kind.\", \"conversations\": ["
                + "{\"from\": \"human\", \"value\": \"Hi\"}, {\"from\": \"gpt\", \"value\": \"Hello there.\"}]}");
        DatasetSpec spec = new DatasetSpec(data, DatasetType.CHAT_TEMPLATE, DataDefaults.FIELD, "conversations",
                Map.of("role", "from", "content", "value"), DataDefaults.ROLES_TO_TRAIN, DataDefaults.TRAIN_ON_EOS, "chatml",
                "recipe.yaml:4:5", null, "train", null, null);
        PreparedData prepared = prepare(DataDefaults.options(), spec);
        Example example = prepared.train().get(0);
        String rendered = "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello there.<|im_end|>\n";
        assertArrayEquals(tokenizer.encode(rendered, false), example.inputIds());
        assertEquals(List.of("Hello there."), runs(example));
        assertTrue(prepared.report().notes().get(0).contains("never writes the EOS token"), prepared.report().notes().toString());
    }

    @Test
    void otherMessageFieldsReachTheTemplate() throws IOException {
        Path data = write("reasoning.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"Why?\", \"name\": \"Sue\"},"
                + " {\"role\": \"assistant\", \"content\": \"Because.\", \"thought\": \"Think.\", \"score\": 3, \"extra\": null}]}");
        Path template = write("t.jinja", "{% for m in messages %}[{{ m.role }}{% if m.name %} {{ m.name }}{% endif %}]"
                + "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}"
                + "{% if m.score is defined %} ({{ m.score }}){% endif %}{% endfor %}");
        DatasetSpec spec = new DatasetSpec(data, DatasetType.CHAT_TEMPLATE, DataDefaults.FIELD, null,
                Map.of("reasoning_content", "thought"), DataDefaults.ROLES_TO_TRAIN, DataDefaults.TRAIN_ON_EOS, "jinja",
                "recipe.yaml:4:5", null, "train", null, null);
        Example example = prepare(DataDefaults.options().withChatTemplate("jinja", template.toString()), spec).train().get(0);
        assertArrayEquals(tokenizer.encode("[user Sue]Why?[assistant]<think>Think.</think>Because. (3)", false), example.inputIds());
        assertEquals(List.of("Because."), runs(example));
    }

    @Test
    void completionLearnsEverythingAndSplitsLongText() throws IOException {
        String story = "Once upon a time there was a little girl named Lily. She loved to play outside in the park. ".repeat(6);
        Path data = write("stories.jsonl", "{\"story\": \"" + story + "\"}");
        DatasetSpec spec = new DatasetSpec(data, DatasetType.COMPLETION, "story", null, null, null, null, null, "recipe.yaml:4:5", null, "train", null, null);
        PreparedData prepared = prepare(DataDefaults.options().withSequenceLen(64), spec);
        int[] whole = concat(tokenizer.encode(story, true), new int[] {EOS});
        List<Example> chunks = prepared.train();
        assertEquals((whole.length + 63) / 64, chunks.size());
        int[] joined = chunks.stream().flatMapToInt(e -> Arrays.stream(e.inputIds())).toArray();
        assertArrayEquals(whole, joined);
        for (Example chunk : chunks) {
            assertTrue(chunk.length() <= 64);
            assertArrayEquals(chunk.inputIds(), chunk.labels());
        }
        assertEquals(0, prepared.report().tooLong());
    }

    @Test
    void inputOutputLearnsLabelledSegmentsOnly() throws IOException {
        Path data = write("io.jsonl", "{\"segments\": [{\"text\": \"<s>Question: why?\", \"label\": false},"
                + " {\"text\": \" Because.</s>\", \"label\": true}]}");
        Example example = prepare(DataDefaults.options(), spec(data, "input_output")).train().get(0);
        int[] question = tokenizer.encode("<s>Question: why?", false);
        int[] answer = tokenizer.encode(" Because.</s>", false);
        assertArrayEquals(concat(question, answer), example.inputIds());
        assertArrayEquals(answer, labelled(example));
        assertEquals(1, example.inputIds()[0], "no BOS is added: the text's own <s> is the first token");
    }

    @Test
    void packingKeepsEveryExampleItsMaskAndItsBoundaries() throws IOException {
        List<String> rows = new ArrayList<>();
        for (int i = 0; i < 40; i++) {
            rows.add("{\"instruction\": \"Tell story " + i + "\", \"output\": \"" + "Tom ran. ".repeat(1 + i % 7) + "\"}");
        }
        Path data = write("many.jsonl", rows.toArray(String[]::new));
        DataOptions options = DataDefaults.options().withSequenceLen(256).withSamplePacking(true);
        PreparedData prepared = prepare(options, spec(data, "alpaca"));
        List<Example> examples = prepared.train();
        List<TokenBatch> batches = prepared.trainBatches(0, 3);
        Set<String> seen = new HashSet<>();
        long targets = 0;
        for (TokenBatch batch : batches) {
            assertEquals(256, batch.length());
            long batchTargets = 0;
            for (int r = 0; r < batch.rows(); r++) {
                int t = 0;
                while (t < 256 && batch.segmentIds()[r][t] != 0) {
                    int start = t;
                    long segment = batch.segmentIds()[r][t];
                    while (t < 256 && batch.segmentIds()[r][t] == segment) {
                        assertEquals(t - start, batch.positionIds()[r][t], "positions restart in every segment");
                        t++;
                    }
                    long[] ids = Arrays.copyOfRange(batch.inputIds()[r], start, t);
                    Example example = examples.stream().filter(e -> Arrays.equals(Arrays.stream(e.inputIds()).asLongStream().toArray(), ids))
                            .findFirst().orElseThrow();
                    assertTrue(seen.add(Arrays.toString(ids)), "each example is packed once");
                    for (int k = start; k < t; k++) {
                        long expectedLabel = k == start ? Example.IGNORE : example.labels()[k - start];
                        assertEquals(expectedLabel, batch.labels()[r][k], "label at " + k);
                    }
                    assertEquals(Example.IGNORE, batch.labels()[r][start], "nothing predicts an example's first token");
                }
                for (; t < 256; t++) {
                    assertEquals(0, batch.segmentIds()[r][t]);
                    assertEquals(Example.IGNORE, batch.labels()[r][t]);
                }
                batchTargets += Arrays.stream(batch.labels()[r]).skip(1).filter(l -> l != Example.IGNORE).count();
            }
            assertEquals(batchTargets, batch.targetTokens());
            // The loop's SftBatch reads the same arrays and must count the same targets.
            SftBatch sft = new SftBatch(batch.rows(), batch.length(), TokenBatch.rowMajor(batch.inputIds()), TokenBatch.rowMajor(batch.positionIds()),
                    TokenBatch.rowMajor(batch.segmentIds()), TokenBatch.rowMajor(batch.labels()));
            assertEquals(batch.targetTokens(), sft.lossWeight());
            targets += batchTargets;
        }
        assertEquals(examples.size(), seen.size());
        assertEquals(examples.stream().mapToLong(Example::targets).sum(), targets);
        DataReport report = prepared.report();
        assertEquals(report.sequences(), batches.stream().mapToInt(TokenBatch::rows).sum());
        long tokens = examples.stream().mapToLong(Example::length).sum();
        assertEquals((double) tokens / (report.sequences() * 256L), report.packingEfficiency(), 1e-12);
        assertTrue(report.packingEfficiency() > 0.9, "packing efficiency " + report.packingEfficiency());
        assertTrue(report.describe().contains("filled"), report.describe());
    }

    @Test
    void withoutPackingRowsArePaddedToTheLongestInTheBatch() throws IOException {
        Path data = write("two.jsonl", "{\"instruction\": \"A\", \"output\": \"Tom ran.\"}",
                "{\"instruction\": \"B\", \"output\": \"Tom ran and ran and ran to the big park.\"}");
        PreparedData prepared = prepare(DataDefaults.options(), spec(data, "alpaca"));
        TokenBatch batch = prepared.trainBatches(0, 2).get(0);
        int longest = prepared.train().stream().mapToInt(Example::length).max().orElseThrow();
        assertEquals(longest, batch.length());
        assertEquals(prepared.train().stream().mapToLong(Example::targets).sum(), batch.targetTokens());
        for (int r = 0; r < 2; r++) {
            long[] segments = batch.segmentIds()[r];
            int real = (int) Arrays.stream(segments).filter(s -> s == 1).count();
            for (int t = real; t < longest; t++) {
                assertEquals(0, segments[t]);
                assertEquals(EOS, batch.inputIds()[r][t], "stories260K has no pad token, so EOS pads");
            }
        }
    }

    @Test
    void overLongExamplesAreDroppedTruncatedOrRefusedAndCounted() throws IOException {
        String shortText = "Tom ran.";
        String longText = "Tom ran to the park. ".repeat(20);
        assertTrue(tokenizer.encode(longText, false).length > 60 && tokenizer.encode(shortText, false).length < 60);
        Path data = write("long.jsonl", "{\"segments\": [{\"text\": \"" + shortText + "\", \"label\": true}]}",
                "{\"segments\": [{\"text\": \"" + longText + "\", \"label\": true}]}");
        DataOptions options = DataDefaults.options().withSequenceLen(60);
        PreparedData dropped = prepare(options, spec(data, "input_output"));
        assertEquals(1, dropped.report().tooLong());
        assertEquals(1, dropped.train().size());

        PreparedData truncated = prepare(options.withExcessLength(ExcessLength.TRUNCATE), spec(data, "input_output"));
        assertEquals(1, truncated.report().tooLong());
        assertEquals(2, truncated.train().size());
        assertEquals(60, truncated.train().get(1).length());
        assertTrue(truncated.report().describe().contains("1 examples truncated"), truncated.report().describe());

        UserError refused = assertThrows(UserError.class,
                () -> prepare(options.withExcessLength(ExcessLength.RAISE), spec(data, "input_output")));
        assertEquals(data + ":2", refused.where());
        assertTrue(refused.getMessage().contains("more than sequence_len 60"), refused.getMessage());
    }

    @Test
    void validationSplitIsSeededAndStable() throws IOException {
        List<String> rows = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            rows.add("{\"text\": \"Story number " + i + " is about Tom.\"}");
        }
        Path data = write("split.jsonl", rows.toArray(String[]::new));
        DataOptions options = DataDefaults.options().withValSetSize(0.2);
        PreparedData first = prepare(options, spec(data, "completion"));
        PreparedData again = prepare(options, spec(data, "completion"));
        assertEquals(4, first.eval().size());
        assertEquals(16, first.train().size());
        assertEquals(texts(first.eval()), texts(again.eval()));
        assertNotEquals(texts(first.eval()), texts(prepare(options.withSeed(7), spec(data, "completion")).eval()));
        assertEquals(3, prepare(options.withValSetSize(3), spec(data, "completion")).eval().size());
        Set<String> union = new HashSet<>(texts(first.train()));
        union.addAll(texts(first.eval()));
        assertEquals(20, union.size(), "train and eval are disjoint and complete");

        List<TokenBatch> epoch0 = first.trainBatches(0, 4);
        assertEquals(flatten(epoch0), flatten(again.trainBatches(0, 4)));
        assertNotEquals(flatten(epoch0), flatten(first.trainBatches(1, 4)));
        assertThrows(UserError.class, () -> prepare(options.withValSetSize(20), spec(data, "completion")));
    }

    @Test
    void brokenLinesNameFileAndLine() throws IOException {
        Path data = write("broken.jsonl", "{\"instruction\": \"A\", \"output\": \"Ok.\"}", "", "{\"instruction\": \"B\", \"output\": ",
                "{\"instruction\": \"C\"}", "{\"instruction\": \"D\", \"output\": 7}", "[1, 2]");
        UserError badJson = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), spec(data, "alpaca")));
        assertEquals(data + ":3", badJson.where());
        assertTrue(badJson.getMessage().startsWith("not valid JSON"), badJson.getMessage());
        assertTrue(badJson.oneLine().contains("dataset_skip_invalid_rows"), badJson.oneLine());

        PreparedData skipping = prepare(DataDefaults.options().withSkipInvalidRows(true), spec(data, "alpaca"));
        DataReport report = skipping.report();
        assertEquals(4, report.skippedRows());
        assertEquals(List.of(data + ":3", data + ":4", data + ":5", data + ":6"), report.skippedAt());
        assertEquals(1, skipping.train().size());
        assertTrue(report.describe().contains("invalid rows skipped: 4"), report.describe());

        Path missing = write("missing.jsonl", "{\"instruction\": \"C\"}");
        UserError missingField = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), spec(missing, "alpaca")));
        assertEquals(missing + ":1: missing field 'output' (type alpaca)", missingField.oneLine().substring(0, missingField.oneLine().indexOf(" (hint")));
        Path wrongType = write("wrong.jsonl", "{\"instruction\": \"D\", \"output\": 7}");
        UserError typed = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), spec(wrongType, "alpaca")));
        assertEquals("field 'output' must be a string, found the number 7", typed.getMessage());
        Path badChat = write("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\"}]}");
        UserError chatError = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), chat(badChat, "chatml", null, null)));
        assertEquals(badChat + ":1", chatError.where());
        assertTrue(chatError.getMessage().contains("messages[1] has no 'content'"), chatError.getMessage());
        Path alternation = write("order.jsonl", "{\"messages\": [{\"role\": \"assistant\", \"content\": \"Hi\"}]}");
        UserError templateRaised = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), chat(alternation, "mistral", null, null)));
        assertTrue(templateRaised.getMessage().contains("roles must alternate"), templateRaised.getMessage());
    }

    @Test
    void jsonArraysReportTheLineOfTheElement() throws IOException {
        Path data = write("array.json", "[", "  {\"text\": \"Tom ran.\"},", "  {\"txt\": \"Lily ran.\"}", "]");
        UserError error = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), spec(data, "completion")));
        assertEquals(data + ":3 (element 1)", error.where());
        assertTrue(error.getMessage().contains("missing field 'text'"), error.getMessage());
        Path broken = write("broken.json", "[", "  {\"text\": \"Tom ran.\"},", "  {\"text\": oops}", "]");
        UserError syntax = assertThrows(UserError.class, () -> prepare(DataDefaults.options().withSkipInvalidRows(true), spec(broken, "completion")));
        assertEquals(broken + ":3", syntax.where());
    }

    @Test
    void preTokenizedRowsAndUnknownTypes() throws IOException {
        Path data = write("ids.jsonl", "{\"input_ids\": [1, 403, 407, 261], \"labels\": [-100, -100, 407, 261]}");
        Example example = prepare(DataDefaults.options(), spec(data, null)).train().get(0);
        assertArrayEquals(new int[] {1, 403, 407, 261}, example.inputIds());
        assertEquals(2, example.targets());
        // a preference type reaching the supervised path (the recipe reader refuses it first; see DatasetTypes)
        UserError unknown = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), spec(data, "passthrough")));
        assertEquals("recipe.yaml:4:5", unknown.where());
        assertTrue(unknown.hint().contains("chat_template"), unknown.hint());
        UserError absent = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), spec(dir.resolve("nope.jsonl"), "alpaca")));
        assertEquals("recipe.yaml:4:5", absent.where());
        DatasetSpec hub = new DatasetSpec(null, DatasetType.ALPACA, DataDefaults.FIELD, null, null, DataDefaults.ROLES_TO_TRAIN,
                DataDefaults.TRAIN_ON_EOS, null, "recipe.yaml:4:5", "tatsu-lab/alpaca", "train", null, null);
        UserError remote = assertThrows(UserError.class, () -> prepare(DataDefaults.options(), hub));
        assertTrue(remote.getMessage().contains("tatsu-lab/alpaca"), remote.getMessage());
        DatasetSpec testSplit = new DatasetSpec(data, null, null, null, null, null, null, null, "recipe.yaml:4:5", null, "test", null, null);
        assertTrue(assertThrows(UserError.class, () -> prepare(DataDefaults.options(), testSplit)).getMessage().contains("split"));
    }

    @Test
    void reportCountsTokensAndTheShareLearned() throws IOException {
        Path data = write("r.jsonl", "{\"instruction\": \"Tell a story\", \"output\": \"Tom ran.\"}");
        DataReport report = prepare(DataDefaults.options(), spec(data, "alpaca")).report();
        Example only = prepare(DataDefaults.options(), spec(data, "alpaca")).train().get(0);
        assertEquals(only.length(), report.trainTokens());
        assertEquals(tokenizer.encode("Tom ran.", false).length + 1, report.trainTargets());
        assertEquals((double) report.trainTargets() / report.trainTokens(), report.trainedShare(), 1e-12);
        assertTrue(report.describe().startsWith("data: 1 train / 0 eval examples from 1 dataset"), report.describe());
    }

    static List<String> texts(List<Example> examples) {
        return examples.stream().map(e -> tokenizer.decode(e.inputIds(), true)).toList();
    }

    static List<List<Long>> flatten(List<TokenBatch> batches) {
        List<List<Long>> out = new ArrayList<>();
        for (TokenBatch batch : batches) {
            for (long[] row : batch.inputIds()) {
                out.add(Arrays.stream(row).boxed().toList());
            }
        }
        return out;
    }

    static int[] concat(int[]... parts) {
        return Arrays.stream(parts).flatMapToInt(Arrays::stream).toArray();
    }
}
