package dev.finetune.trainers.data;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.trainers.text.Tokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code preprocess --debug}'s view of a real chat row: the assistant's tokens in brackets, the rest not. */
class TokenDebugTest {

    @Test
    void theTrainedTokensAreBracketedAndCounted(@TempDir Path dir) throws IOException {
        Path data = dir.resolve("chat.jsonl");
        Files.writeString(data, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi?\"}, "
                + "{\"role\": \"assistant\", \"content\": \"Once upon a time\"}]}\n");
        try (Tokenizer tokenizer = Tokenizer.load(DataPipelineTest.STORIES)) {
            Example example = DataPipeline.prepare(List.of(DataPipelineTest.chat(data, "chatml", null, null)),
                    DataDefaults.options().withSamplePacking(false), tokenizer).train().get(0);
            String shown = TokenDebug.render(example, tokenizer, false);
            int trained = 0;
            for (int label : example.labels()) {
                trained += label != Example.IGNORE ? 1 : 0;
            }
            assertEquals(trained, shown.chars().filter(c -> c == '[').count(), shown);
            assertTrue(shown.contains("\\n"), "newlines are shown as escapes: " + shown);
            assertTrue(!shown.startsWith("["), "the prompt is not trained: " + shown);
            assertTrue(TokenDebug.render(example, tokenizer, true).contains("\u001b[32m"), "green on a terminal");
            assertTrue(TokenDebug.counts(List.of(example)).startsWith("1 examples, " + example.length() + " tokens, "
                    + trained + " trained on"), TokenDebug.counts(List.of(example)));
        }
    }
}
