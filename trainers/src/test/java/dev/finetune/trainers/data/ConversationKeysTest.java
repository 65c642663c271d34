package dev.finetune.trainers.data;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.text.Tokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * One test per conversation key of a {@code chat_template} dataset: each recipe is read by the recipe reader as a
 * user writes it, its rows tokenized by the trainer's data code, and the effect shown on the tokens and on which of
 * them carry loss (what {@code preprocess --debug} prints), against the same recipe without the key.
 */
class ConversationKeysTest {
    static Tokenizer tokenizer;

    @TempDir
    Path dir;

    @BeforeAll
    static void load() {
        tokenizer = Tokenizer.load(DataPipelineTest.STORIES);
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    /** The one example of a one-row dataset under a recipe with {@code datasetKeys} and {@code topKeys}. */
    Example example(String row, String datasetKeys, String topKeys) throws IOException {
        return prepare(List.of(row), datasetKeys, topKeys).train().get(0);
    }

    PreparedData prepare(List<String> rows, String datasetKeys, String topKeys) throws IOException {
        Files.writeString(dir.resolve("rows.jsonl"), String.join("\n", rows) + "\n");
        Path recipe = dir.resolve("recipe.yaml");
        Files.writeString(recipe, "base_model: " + DataPipelineTest.STORIES.toAbsolutePath().normalize() + "\n"
                + "learning_rate: 1e-3\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\nsequence_len: 512\n" + topKeys + "\n"
                + "datasets:\n  - path: rows.jsonl\n    type: chat_template\n"
                + datasetKeys.lines().map(l -> "    " + l + "\n").reduce("", String::concat));
        Recipe r = ValidatedRecipe.load(recipe, List.of()).recipe();
        return DataPipeline.prepare(r.data().datasets(), DataOptions.of(r), tokenizer);
    }

    static String text(Example example) {
        return tokenizer.decode(example.inputIds(), false);
    }

    /** The text of each stretch of consecutive tokens that carry loss. */
    static List<String> trained(Example example) {
        List<String> runs = new java.util.ArrayList<>();
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
            runs.add(tokenizer.decode(java.util.Arrays.copyOfRange(example.labels(), start, t), false));
        }
        return runs;
    }

    /** The example's tokens are those of {@code rendered}: what the template wrote, compared token by token. */
    static void assertRendered(String rendered, Example example) {
        assertArrayEquals(tokenizer.encode(rendered, false), example.inputIds(), () -> "got " + text(example));
    }

    static final String CHATML = "chat_template: chatml";

    @Test
    void rolesMapTheDatasetsRoleNames() throws IOException {
        String row = "{\"messages\": [{\"role\": \"customer\", \"content\": \"Where is Tom?\"},"
                + " {\"role\": \"agent\", \"content\": \"In the park.\"}]}";
        UserError none = org.junit.jupiter.api.Assertions.assertThrows(UserError.class, () -> example(row, "", CHATML));
        assertTrue(none.getMessage().contains("1 with no token to learn"), "an 'agent' turn is not an assistant turn: "
                + none.getMessage());
        Example mapped = example(row, "roles: {user: [customer], assistant: [agent]}", CHATML);
        assertRendered("<|im_start|>user\nWhere is Tom?<|im_end|>\n<|im_start|>assistant\nIn the park.<|im_end|>\n", mapped);
        assertEquals(List.of("In the park."), trained(mapped));
    }

    @Test
    void trainOnEotDecidesTheTurnEndTokensApartFromEos() throws IOException {
        // a template whose turns end with <unk> (one token of this tokenizer), and whose conversation ends with EOS
        String template = "chat_template: jinja\nchat_template_jinja: \"{% for m in messages %}{{ m.role }}: {{ m.content }}<unk>{% endfor %}</s>\"\n"
                + "eot_tokens: ['<unk>']";
        String row = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"},"
                + " {\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": \"assistant\", \"content\": \"See you.\"}]}";
        Example followsEos = example(row, "train_on_eos: none", template);
        assertEquals(List.of("Hello.", "See you."), trained(followsEos), "train_on_eot follows train_on_eos: none");
        Example turnEnds = example(row, "train_on_eos: none\ntrain_on_eot: turn", template);
        assertEquals(List.of("Hello.<unk>", "See you.<unk>"), trained(turnEnds));
        Example last = example(row, "train_on_eos: none\ntrain_on_eot: last", template);
        assertEquals(List.of("Hello.", "See you.<unk>"), trained(last));
        Example all = example(row, "train_on_eos: none\ntrain_on_eot: all", template);
        assertEquals(List.of("<unk>", "Hello.<unk>", "<unk>", "See you.<unk>"), trained(all));
    }

    @Test
    void anEotTokenThatIsSeveralTokensIsRefused() throws IOException {
        UserError e = org.junit.jupiter.api.Assertions.assertThrows(UserError.class, () -> example(
                "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}]}",
                "", CHATML + "\neot_tokens: ['<|im_end|>']"));
        assertTrue(e.getMessage().contains("is not one token"), e.getMessage());
    }

    @Test
    void aDatasetsOwnJinjaTemplate() throws IOException {
        String row = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}]}";
        assertRendered("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n", example(row, "", CHATML));
        Example own = example(row, "chat_template_jinja: \"{% for m in messages %}[{{ m.role }}] {{ m.content }}\\n{% endfor %}\"", CHATML);
        assertRendered("[user] Hi\n[assistant] Hello.\n", (own));
        assertEquals(List.of("Hello."), trained(own));
    }

    @Test
    void dropSystemMessageLeavesTheSystemTurnOut() throws IOException {
        String row = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be kind.\"}, {\"role\": \"user\", \"content\": \"Hi\"},"
                + " {\"role\": \"assistant\", \"content\": \"Hello.\"}]}";
        assertRendered("<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n",
                example(row, "", CHATML));
        Example dropped = example(row, "drop_system_message: true", CHATML);
        assertRendered("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n", (dropped));
    }

    @Test
    void fieldSystemNamesTheRowsSystemText() throws IOException {
        String row = "{\"instructions\": \"Be kind.\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"},"
                + " {\"role\": \"assistant\", \"content\": \"Hello.\"}]}";
        String turns = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n";
        assertRendered(turns, example(row, "", CHATML));
        assertRendered("<|im_start|>system\nBe kind.<|im_end|>\n" + turns, example(row, "field_system: instructions", CHATML));
    }

    @Test
    void defaultSystemMessageFillsConversationsWithoutOne() throws IOException {
        String bare = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}]}";
        String own = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"},"
                + " {\"role\": \"assistant\", \"content\": \"Hello.\"}]}";
        String key = CHATML + "\ndefault_system_message: You tell stories.";
        String turns = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n";
        assertRendered("<|im_start|>system\nYou tell stories.<|im_end|>\n" + turns, example(bare, "", key));
        // a conversation's own system turn stays
        assertRendered("<|im_start|>system\nBe brief.<|im_end|>\n" + turns, example(own, "", key));
        assertRendered(turns, example(bare, "", CHATML));
    }

    @Test
    void chatTemplateKwargsReachTheTemplate() throws IOException {
        // (jinjava drops the blanks before a {% tag %}: the templates here put them after)
        String template = "chat_template: jinja\nchat_template_jinja: \"{% for m in messages %}{{ m.role }}:"
                + "{% if m.role == 'assistant' and enable_thinking %} <think></think>{% endif %} {{ m.content }}\\n{% endfor %}\"";
        String row = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}]}";
        assertRendered("user: Hi\nassistant: Hello.\n", (example(row, "", template)));
        assertRendered("user: Hi\nassistant: <think></think> Hello.\n", (example(row, "", template + "\nchat_template_kwargs: {enable_thinking: true}")));
    }

    @Test
    void fieldToolsGivesTheRowsToolsToTheTemplate() throws IOException {
        String template = "chat_template: jinja\nchat_template_jinja: \"{% if tools %}tools:{% for t in tools %} {{ t.name }}{% endfor %};{% endif %}"
                + "{% for m in messages %} {{ m.role }}: {{ m.content }}\\n{% endfor %}\"";
        String row = "{\"functions\": [{\"name\": \"weather\"}, {\"name\": \"time\"}], \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"},"
                + " {\"role\": \"assistant\", \"content\": \"Hello.\"}]}";
        assertRendered(" user: Hi\n assistant: Hello.\n", (example(row, "", template)));
        assertRendered("tools: weather time; user: Hi\n assistant: Hello.\n", (example(row, "field_tools: functions", template)));
    }

    static final String THINKING_TEMPLATE = "chat_template: jinja\nchat_template_jinja: \"{% for m in messages %}{{ m.role }}:"
            + "{% if m.reasoning %} ({{ m.reasoning }}){% endif %}{% if m.reasoning_content %} [{{ m.reasoning_content }}]{% endif %}"
            + " {{ m.content }}\\n{% endfor %}\"";

    @Test
    void fieldThinkingAndTemplateThinkingKeyRouteTheReasoning() throws IOException {
        String row = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello.\","
                + " \"thought\": \"greet back\"}]}";
        // by default the message's own field names reach the template unchanged
        assertRendered("user: Hi\nassistant: Hello.\n", (example(row, "", THINKING_TEMPLATE)));
        assertRendered("user: Hi\nassistant: [greet back] Hello.\n", (example(row, "field_thinking: thought", THINKING_TEMPLATE)));
        assertRendered("user: Hi\nassistant: (greet back) Hello.\n", (example(row, "field_thinking: thought\ntemplate_thinking_key: reasoning", THINKING_TEMPLATE)));
    }

    @Test
    void splitThinkingMovesTheThinkBlockOutOfTheContent() throws IOException {
        String row = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\":"
                + " \"<think> greet back </think>\\n Hello.\"}]}";
        assertRendered("user: Hi\nassistant: <think> greet back </think>\n Hello.\n", (example(row, "", THINKING_TEMPLATE)));
        Example split = example(row, "split_thinking: true", THINKING_TEMPLATE);
        assertRendered("user: Hi\nassistant: [greet back] Hello.\n", (split));
        assertEquals(List.of("Hello."), trained(split), "the answer is the turn's content; the reasoning is template text here");
    }

    static final String FLAGGED = "{\"messages\": [{\"role\": \"user\", \"content\": \"Where is Tom?\", \"train\": true},"
            + " {\"role\": \"assistant\", \"content\": \"In the park.\", \"train\": false},"
            + " {\"role\": \"user\", \"content\": \"Why?\"}, {\"role\": \"assistant\", \"content\": \"He likes the sun.\"}]}";

    @Test
    void messageFieldTrainingOverridesTheRolePerTurn() throws IOException {
        assertEquals(List.of("In the park.", "He likes the sun."), trained(example(FLAGGED, "", CHATML)));
        assertEquals(List.of("Where is Tom?", "He likes the sun."),
                trained(example(FLAGGED, "message_field_training: train", CHATML)));
    }

    @Test
    void messageFieldTrainingDetailTrainsOnlyTheMarkedCharacters() throws IOException {
        String row = "{\"messages\": [{\"role\": \"user\", \"content\": \"Where is Tom?\"}, {\"role\": \"assistant\", \"content\":"
                + " \"In the park. He likes the sun.\", \"spans\": [{\"begin_offset\": 0, \"end_offset\": 11, \"train\": false},"
                + " {\"begin_offset\": 12, \"end_offset\": 29, \"train\": true}]}]}";
        assertEquals(List.of("In the park. He likes the sun."), trained(example(row, "", CHATML)));
        assertEquals(List.of("He likes the sun."), trained(example(row, "message_field_training_detail: spans", CHATML)));
    }

    @Test
    void contentPartsWithTrainFlagsAreTrainedPartByPart() throws IOException {
        String row = "{\"messages\": [{\"role\": \"user\", \"content\": \"Where is Tom?\"}, {\"role\": \"assistant\", \"content\": ["
                + "{\"type\": \"text\", \"text\": \"In the park.\", \"train\": false}, {\"type\": \"text\", \"text\": \" He likes the sun.\"}]}]}";
        Example example = example(row, "", CHATML);
        assertRendered("<|im_start|>user\nWhere is Tom?<|im_end|>\n<|im_start|>assistant\nIn the park. He likes the sun.<|im_end|>\n", example);
        assertEquals(List.of("He likes the sun."), trained(example));
    }

    @Test
    void aKeyTheTypeDoesNotReadIsWarnedAbout() throws IOException {
        Files.writeString(dir.resolve("rows.jsonl"), "{\"instruction\": \"Say hi\", \"output\": \"Hi!\"}\n");
        Path recipe = dir.resolve("recipe.yaml");
        Files.writeString(recipe, "base_model: " + DataPipelineTest.STORIES.toAbsolutePath().normalize() + "\n"
                + "learning_rate: 1e-3\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\ndatasets:\n  - path: rows.jsonl\n    type: alpaca\n    drop_system_message: true\n");
        ValidatedRecipe validated = ValidatedRecipe.load(recipe, List.of());
        assertTrue(validated.warnings().stream().anyMatch(w -> w.oneLine().contains("datasets[].drop_system_message has no effect on type alpaca")),
                validated.warnings().toString());
    }

    @Test
    void preferenceRowsMapRolesAndFieldNamesToo() throws IOException {
        Files.writeString(dir.resolve("pairs.jsonl"), "{\"conversation\": [{\"speaker\": \"customer\", \"text\": \"Hi\"}],"
                + " \"chosen\": {\"speaker\": \"agent\", \"text\": \"Hello.\"}, \"rejected\": {\"speaker\": \"agent\", \"text\": \"Go.\"}}\n");
        Path recipe = dir.resolve("dpo.yaml");
        Files.writeString(recipe, "base_model: " + DataPipelineTest.STORIES.toAbsolutePath().normalize() + "\n"
                + "learning_rate: 1e-3\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\nrl: dpo\nchat_template: chatml\ndatasets:\n  - path: pairs.jsonl\n    type: chat_template.default\n"
                + "    field_messages: conversation\n    message_property_mappings: {role: speaker, content: text}\n"
                + "    roles: {user: [customer], assistant: [agent]}\n");
        Recipe r = ValidatedRecipe.load(recipe, List.of()).recipe();
        PreferencePair pair = RlRows.preferences(r.data().datasets(), DataOptions.of(r), tokenizer).train().get(0);
        // Axolotl's chat_template.default renders to text, which TRL tokenizes with BOS
        String prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
        assertArrayEquals(longs(tokenizer.encode(prompt, true)), pair.prompt());
        long[] answered = longs(tokenizer.encode(prompt + "Hello.<|im_end|>\n", true));
        assertArrayEquals(java.util.Arrays.copyOfRange(answered, pair.prompt().length, answered.length),
                java.util.Arrays.copyOf(pair.chosen(), pair.chosen().length - 1), "the chosen answer, then EOS");
    }

    static long[] longs(int[] ids) {
        return java.util.Arrays.stream(ids).asLongStream().toArray();
    }

    static long[] concat(long[] a, long[] b) {
        long[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
