package dev.finetune.trainers.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.google.gson.Gson;
import com.google.gson.JsonObject;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Renders every {@code .jinja} file in {@code -Dfinetune.templates.dir} with our jinjava setup and with Jinja2
 * (transformers' settings, through {@code jinja2_reference.py}), and requires identical text, or an error from
 * both. Off unless that directory is given and python3 has jinja2; run it on a new model's template, e.g.
 * {@code mvn -o test -pl trainers -am -Dtest=TemplateParityTest -Dfinetune.templates.dir=/path/to/templates}.
 */
class TemplateParityTest {
    static final List<List<Message>> CONVERSATIONS = List.of(
            ChatTemplatesTest.WITH_SYSTEM,
            ChatTemplatesTest.WITHOUT_SYSTEM,
            List.of(new Message("user", "  Spaces around  "), new Message("assistant", "\nNew line first, then é and \"quotes\"")),
            List.of(new Message("system", "S"), new Message("user", "Q")));

    @Test
    void everyTemplateRendersAsJinja2Does() throws Exception {
        String dir = System.getProperty("finetune.templates.dir");
        assumeTrue(dir != null && Files.isDirectory(Path.of(dir)), "set -Dfinetune.templates.dir to run");
        assumeTrue(run(List.of("python3", "-c", "import jinja2"), "").exitCode() == 0, "python3 with jinja2 is needed");

        Map<String, String> templates = new LinkedHashMap<>();
        try (Stream<Path> files = Files.list(Path.of(dir))) {
            for (Path file : files.filter(f -> f.toString().endsWith(".jinja")).sorted().toList()) {
                templates.put(file.getFileName().toString(), Files.readString(file));
            }
        }
        JsonObject request = new JsonObject();
        request.add("templates", new Gson().toJsonTree(templates));
        List<List<Map<String, String>>> conversations = new ArrayList<>();
        for (List<Message> conversation : CONVERSATIONS) {
            conversations.add(conversation.stream().map(m -> Map.of("role", m.role(), "content", m.content())).toList());
        }
        request.add("conversations", new Gson().toJsonTree(conversations));
        request.addProperty("bos_token", "<s>");
        request.addProperty("eos_token", "</s>");
        Path script = Files.createTempFile("jinja2_reference", ".py");
        try (InputStream in = getClass().getResourceAsStream("jinja2_reference.py")) {
            Files.write(script, in.readAllBytes());
        }
        Result reference = run(List.of("python3", script.toString()), request.toString());
        assertEquals(0, reference.exitCode(), reference.output());
        JsonObject expected = new Gson().fromJson(reference.output(), JsonObject.class);

        List<String> differences = new ArrayList<>();
        int compared = 0;
        try (Tokenizer tokenizer = Tokenizer.load(TokenizerTest.STORIES)) {
            for (Map.Entry<String, String> template : templates.entrySet()) {
                for (int c = 0; c < CONVERSATIONS.size(); c++) {
                    for (boolean generationPrompt : new boolean[] {false, true}) {
                        String key = template.getKey() + "|" + c + "|" + generationPrompt;
                        String want = expected.get(key).getAsString();
                        String got;
                        try {
                            got = ChatTemplates.resolve("jinja", template.getValue(), tokenizer, key).render(CONVERSATIONS.get(c), generationPrompt);
                        } catch (RuntimeException e) {
                            got = "ERROR: " + e.getMessage();
                        }
                        compared++;
                        if (!(want.startsWith("ERROR: ") && got.startsWith("ERROR: ")) && !want.equals(got)) {
                            differences.add(key + "\n  jinja2: " + want.replace("\n", "\\n") + "\n  ours:   " + got.replace("\n", "\\n"));
                        }
                    }
                }
            }
        }
        System.out.println("template parity: " + templates.size() + " templates, " + compared + " renders, "
                + differences.size() + " different");
        assertEquals(List.of(), differences);
    }

    record Result(int exitCode, String output) {}

    static Result run(List<String> command, String stdin) throws IOException, InterruptedException {
        Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
        process.getOutputStream().write(stdin.getBytes(StandardCharsets.UTF_8));
        process.getOutputStream().close();
        String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        return new Result(process.waitFor(), output);
    }
}
