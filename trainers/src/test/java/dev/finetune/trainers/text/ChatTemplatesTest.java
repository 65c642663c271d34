package dev.finetune.trainers.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.ChatTemplateNames;
import dev.finetune.recipes.UserError;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Expected strings are written from each format's public definition, with stories260K's {@code <s>}/{@code </s>}. */
class ChatTemplatesTest {
    static Tokenizer tokenizer;

    static final List<Message> WITH_SYSTEM = List.of(
            new Message("system", "You are terse."),
            new Message("user", "Hi there"),
            new Message("assistant", "Hello."),
            new Message("user", "Bye"),
            new Message("assistant", "Goodbye."));
    static final List<Message> WITHOUT_SYSTEM = WITH_SYSTEM.subList(1, WITH_SYSTEM.size());

    @BeforeAll
    static void load() {
        tokenizer = Tokenizer.load(TokenizerTest.STORIES);
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    /** The shipped names live in recipes (validate reads them); the template files here must match them one to one. */
    @Test
    void everyShippedNameHasItsTemplateFileAndNoFileIsUnnamed() throws Exception {
        Path dir = Path.of(ChatTemplates.class.getResource("templates").toURI());
        Set<String> files;
        try (Stream<Path> list = Files.list(dir)) {
            files = list.map(p -> p.getFileName().toString().replaceFirst("\\.jinja$", "")).collect(Collectors.toCollection(TreeSet::new));
        }
        assertEquals(new TreeSet<>(ChatTemplateNames.SHIPPED), files);
        for (String target : ChatTemplateNames.ALIASES.values()) {
            assertTrue(ChatTemplateNames.SHIPPED.contains(target), target);
        }
    }

    static String render(String name, List<Message> messages, boolean generationPrompt) {
        return ChatTemplates.resolve(name, null, tokenizer, "test").render(messages, generationPrompt);
    }

    @Test
    void chatml() {
        assertEquals("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                + "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                + "<|im_start|>assistant\nGoodbye.<|im_end|>\n", render("chatml", WITH_SYSTEM, false));
        assertEquals("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
                render("chatml", WITHOUT_SYSTEM.subList(0, 1), true));
    }

    @Test
    void qwenAddsItsSystemPromptOnlyWhenNoneIsGiven() {
        assertEquals(render("chatml", WITH_SYSTEM, false), render("qwen", WITH_SYSTEM, false));
        assertEquals("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                + "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
                + "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\nGoodbye.<|im_end|>\n",
                render("qwen_25", WITHOUT_SYSTEM, false));
    }

    @Test
    void llama3() {
        assertEquals("<s><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                + "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                + "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                + "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                + "<|start_header_id|>assistant<|end_header_id|>\n\nGoodbye.<|eot_id|>", render("llama3", WITH_SYSTEM, false));
        assertEquals("<s><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                + "<|start_header_id|>assistant<|end_header_id|>\n\n",
                render("llama3", List.of(new Message("user", "  Hi there\n")), true));
    }

    @Test
    void mistral() {
        assertEquals("<s> [INST] You are terse.\n\nHi there [/INST] Hello.</s> [INST] Bye [/INST] Goodbye.</s>",
                render("mistral", WITH_SYSTEM, false));
        assertEquals("<s> [INST] Hi there [/INST] Hello.</s> [INST] Bye [/INST] Goodbye.</s>",
                render("mistral_v1", WITHOUT_SYSTEM, false));
    }

    @Test
    void llama2() {
        assertEquals("<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello. </s><s>[INST] Bye [/INST] Goodbye. </s>",
                render("llama2", WITH_SYSTEM, false));
    }

    @Test
    void alpaca() {
        assertEquals("<s>You are terse.\n\n### Instruction:\nHi there\n\n### Response:\nHello.</s>\n\n"
                + "### Instruction:\nBye\n\n### Response:\nGoodbye.</s>", render("alpaca", WITH_SYSTEM, false));
        assertEquals("<s>### Instruction:\nHi there\n\n### Response:\n", render("alpaca", WITHOUT_SYSTEM.subList(0, 1), true));
    }

    /** As Phi-3-mini's own template: no BOS, EOS after a conversation that asks for no reply (ChatTemplateFamiliesTest). */
    @Test
    void phi3() {
        assertEquals("<|system|>\nYou are terse.<|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\nHello.<|end|>\n"
                + "<|user|>\nBye<|end|>\n<|assistant|>\nGoodbye.<|end|>\n</s>", render("phi_3", WITH_SYSTEM, false));
        assertEquals("<|user|>\nHi there<|end|>\n<|assistant|>\n", render("phi_35",
                List.of(new Message("system", ""), new Message("user", "Hi there")), true));
    }

    /**
     * Mistral's formats as Axolotl names them (no model template to compare with offline: the strings follow
     * mistral-common's layouts): v2/v3 put no space inside "[INST] ...[/INST]", Tekken none at all, v7 opens with a
     * system prompt, Mistral Small 3's own dated one when the conversation has none.
     */
    @Test
    void mistralVersions() {
        assertEquals("<s>[INST] Hi there[/INST] Hello.</s>[INST] Bye[/INST] Goodbye.</s>",
                render("mistral_v2v3", WITHOUT_SYSTEM, false));
        assertEquals("<s>[INST]Hi there[/INST]Hello.</s>[INST]Bye[/INST]Goodbye.</s>",
                render("mistral_v3_tekken", WITHOUT_SYSTEM, false));
        assertEquals("<s>[SYSTEM_PROMPT]You are terse.[/SYSTEM_PROMPT][INST]Hi there[/INST]Hello.</s>[INST]Bye[/INST]Goodbye.</s>",
                render("mistral_v7_tekken", WITH_SYSTEM, false));
        String dated = render("mistral_v7_tekken", WITHOUT_SYSTEM.subList(0, 1), false);
        assertTrue(dated.startsWith("<s>[SYSTEM_PROMPT]You are Mistral Small 3,") && dated.contains("The current date is "
                + java.time.LocalDate.now()) && dated.endsWith("\"Where do you travel from?\")[/SYSTEM_PROMPT][INST]Hi there[/INST]"), dated);
        assertThrows(TemplateException.class, () -> render("mistral_v2v3", WITH_SYSTEM, false));
    }

    @Test
    void gemma3FoldsTheSystemMessageIntoTheFirstUserTurn() {
        assertEquals("<s><start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                + "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\nGoodbye.<end_of_turn>\n",
                render("gemma3", WITH_SYSTEM, false));
    }

    @Test
    void gemmaAndItsRefusalOfSystemMessages() {
        assertEquals("<s><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                + "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\nGoodbye.<end_of_turn>\n",
                render("gemma", WITHOUT_SYSTEM, false));
        TemplateException raised = assertThrows(TemplateException.class, () -> render("gemma", WITH_SYSTEM, false));
        assertTrue(raised.getMessage().contains("no system role"), raised.getMessage());
    }

    @Test
    void aHuggingFaceStyleChatmlTemplateRendersLikeTheBuiltIn() {
        // Written the way model repositories ship ChatML: dotted access, a loop.last check, no whitespace control.
        String hfStyle = "{% for message in messages %}{{'<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n'}}"
                + "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        ChatTemplate template = ChatTemplates.resolve("jinja", hfStyle, tokenizer, "test");
        assertEquals(render("chatml", WITH_SYSTEM, false), template.render(WITH_SYSTEM, false));
        assertEquals(render("chatml", WITHOUT_SYSTEM, true), template.render(WITHOUT_SYSTEM, true));
    }

    @Test
    void loopFiltersAreHonouredIncludingLoopCounters() {
        String filtered = "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }} {{ m.content }}"
                + "{% if loop.last %}.{% endif %}{{ '\\n' }}{% endfor %}";
        assertEquals("1/4 Hi there\n2/4 Hello.\n3/4 Bye\n4/4 Goodbye..\n",
                ChatTemplates.resolve("jinja", filtered, tokenizer, "test").render(WITH_SYSTEM, false));
        String nested = "{% for m in messages if m.role == 'user' %}{% for c in [m.content] if c != 'Bye' %}{{ c }}{% endfor %}"
                + "{% if loop.last %}.{% endif %}{% endfor %}";
        assertEquals("Hi there.", ChatTemplates.resolve("jinja", nested, tokenizer, "test").render(WITH_SYSTEM, false));
    }

    @Test
    void forElseIsRefusedBecauseJinjavaPrintsItAfterEveryItem() {
        String withElse = "{%- for m in messages if m.role == 'tool' -%}{{ m.content }}{%- else -%}none{%- endfor -%}";
        UserError error = assertThrows(UserError.class, () -> ChatTemplates.resolve("jinja", withElse, tokenizer, "k"));
        assertTrue(error.getMessage().contains("else branch"), error.getMessage());
        String ifElseInFor = "{% for m in messages %}{% if m.role == 'user' %}U{% else %}O{% endif %}{% endfor %}";
        assertEquals("OUOUO", ChatTemplates.resolve("jinja", ifElseInFor, tokenizer, "k").render(WITH_SYSTEM, false));
    }

    @Test
    void notBindsLooserThanComparisonsAsInJinja2() {
        String negated = "{% for m in messages %}{% if not m.role == 'system' and not m.content in ['Bye'] %}{{ m.content }};{% endif %}{% endfor %}"
                + "{{- ' ' ~ (not messages[0]['role'] == 'user') -}}";
        assertEquals("Hi there;Hello.;Goodbye.; true", ChatTemplates.resolve("jinja", negated, tokenizer, "k").render(WITH_SYSTEM, false));
    }

    @Test
    void pythonStringMethodsNamespaceArithmeticAndReversedSlices() {
        String pythonic = "{%- set ns = namespace(last=messages|length - 1, found=false) -%}"
                + "{%- for m in messages[::-1] -%}{%- if not ns.found and m.content.startswith('By') -%}"
                + "{%- set ns.found = true -%}{%- set ns.last = messages|length - 1 - loop.index0 -%}{%- endif -%}{%- endfor -%}"
                + "{{ ns.last }}|{{ 'a.b.c'.split('.') | join('+') }}|{{ '\\n x \\n'.strip() }}|{{ '--x--'.rstrip('-') }}"
                + "|{{ ', '.join(['a', 'b']) }}|{{ 'x</think>y'.split('</think>')[-1] }}\n";
        assertEquals("3|a+b+c|x|--x|a, b|y", ChatTemplates.resolve("jinja", pythonic, tokenizer, "k").render(WITH_SYSTEM, false));
    }

    @Test
    void transformersEnvironmentFeatures() {
        // Indented the way model repositories write templates: {{- and {%- must eat the indentation and newlines.
        String indented = "{%- for message in messages %}\n"
                + "    {%- if message.role == 'assistant' %}\n"
                + "        {{- '<A>' }}{% generation %}{{ message.content }}{% endgeneration %}{{- '</A>' }}\n"
                + "    {%- else %}\n"
                + "        {{- '<' + message.role[0] + '>' + message.content }}\n"
                + "    {%- endif %}\n"
                + "{%- endfor %}\n"
                + "{{- 'date:' ~ (strftime_now is defined) }}\n";
        assertEquals("<s>You are terse.<u>Hi there<A>Hello.</A><u>Bye<A>Goodbye.</A>date:true",
                ChatTemplates.resolve("jinja", indented, tokenizer, "k").render(WITH_SYSTEM, false));
    }

    @Test
    void tojsonWritesWhatPythonsJsonDumpsWrites() {
        String dumps = "{{ {'name': 'tell', 'args': ['x', 'é', 1, true, none]} | tojson }}|{{ {'a': {'b': []} } | tojson(indent=2) }}";
        assertEquals("{\"name\": \"tell\", \"args\": [\"x\", \"é\", 1, true, null]}|{\n  \"a\": {\n    \"b\": []\n  }\n}",
                ChatTemplates.resolve("jinja", dumps, tokenizer, "k").render(WITH_SYSTEM, false));
    }

    @Test
    void unknownFiltersAndTestsAreRefusedNotRenderedEmpty() {
        UserError filter = assertThrows(UserError.class,
                () -> ChatTemplates.resolve("jinja", "{{ messages[0].content | shout }}", tokenizer, "k"));
        assertTrue(filter.getMessage().contains("filter 'shout'"), filter.getMessage());
        UserError test = assertThrows(UserError.class,
                () -> ChatTemplates.resolve("jinja", "{% if messages is shouting %}x{% endif %}", tokenizer, "k"));
        assertTrue(test.getMessage().contains("is shouting"), test.getMessage());
        assertEquals("a|b", ChatTemplates.resolve("jinja", "{{ 'a|b' }}", tokenizer, "k").render(WITH_SYSTEM, false));
    }

    @Test
    void axolotlChoiceSemantics(@TempDir Path dir) throws Exception {
        UserError noDefault = assertThrows(UserError.class, () -> ChatTemplates.resolve(null, null, tokenizer, "chat_template"));
        assertTrue(noDefault.getMessage().contains("no chat template"), noDefault.getMessage());
        assertEquals("chatml", ChatTemplates.resolve("tokenizer_default_fallback_chatml", null, tokenizer, "k").name());
        UserError unknown = assertThrows(UserError.class, () -> ChatTemplates.resolve("chatlm", null, tokenizer, "chat_template"));
        assertTrue(unknown.hint().contains("chatml"), unknown.hint());
        assertThrows(UserError.class, () -> ChatTemplates.resolve("jinja", null, tokenizer, "chat_template"));

        Path file = dir.resolve("t.jinja");
        Files.writeString(file, "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
        ChatTemplate fromFile = ChatTemplates.resolve("jinja", file.toString(), tokenizer, "k");
        assertEquals("[user]Hi there", fromFile.render(WITHOUT_SYSTEM.subList(0, 1), false));
        assertEquals("jinja", ChatTemplates.resolve(null, file.toString(), tokenizer, "k").name());

        Path model = dir.resolve("model");
        Files.createDirectories(model);
        Files.copy(TokenizerTest.STORIES.resolve("tokenizer.json"), model.resolve("tokenizer.json"));
        Files.writeString(model.resolve("tokenizer_config.json"),
                "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\", \"chat_template\": \"{{ messages[0].content }}!\"}");
        try (Tokenizer withTemplate = Tokenizer.load(model)) {
            assertEquals("<s>", withTemplate.special().bos());
            assertEquals("Hi there!", ChatTemplates.resolve(null, null, withTemplate, "k").render(WITHOUT_SYSTEM, false));
            assertEquals("Hi there!", ChatTemplates.resolve("tokenizer_default_fallback_chatml", null, withTemplate, "k")
                    .render(WITHOUT_SYSTEM, false));
        }
    }

    @Test
    void spansLocateEachMessagesContent() {
        for (String name : List.of("chatml", "llama3", "mistral", "llama2", "alpaca", "phi_3", "qwen")) {
            ChatTemplate.Rendered rendered = ChatTemplates.resolve(name, null, tokenizer, "t").renderWithSpans(WITH_SYSTEM);
            assertEquals(render(name, WITH_SYSTEM, false), rendered.text());
            for (int i = 0; i < WITH_SYSTEM.size(); i++) {
                ChatTemplate.Span span = rendered.contents().get(i);
                assertEquals(WITH_SYSTEM.get(i).content(), rendered.text().substring(span.start(), span.end()), name + " message " + i);
            }
        }
        List<Message> padded = List.of(new Message("user", "  Hi  "), new Message("assistant", "Yo"));
        ChatTemplate.Rendered trimmed = ChatTemplates.resolve("llama3", null, tokenizer, "t").renderWithSpans(padded);
        ChatTemplate.Span user = trimmed.contents().get(0);
        assertEquals("Hi", trimmed.text().substring(user.start(), user.end()));
        String dropsSystem = "{% for m in messages %}{% if m.role != 'system' %}{{ m.content }};{% endif %}{% endfor %}";
        ChatTemplate.Rendered dropped = ChatTemplates.resolve("jinja", dropsSystem, tokenizer, "t").renderWithSpans(WITH_SYSTEM);
        assertNull(dropped.contents().get(0));
        assertEquals("Hi there", dropped.text().substring(dropped.contents().get(1).start(), dropped.contents().get(1).end()));
    }
}
