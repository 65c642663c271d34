package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code finetune preprocess RECIPE --debug N}: the first examples token by token, trained tokens marked. */
class PreprocessDebugTest {

    @Test
    @Timeout(300)
    void showsTheFirstExamplesWithTheTrainedTokensMarked(@TempDir Path work) throws Exception {
        PeftParityTest.Run sft = PeftParityTest.finetune("preprocess",
                MainProcessTest.repoRoot().resolve("configs/quickstart.yaml").toString(), "--debug", "2",
                "output_dir=" + work.resolve("out"));
        assertEquals(0, sft.exit(), sft.err());
        assertTrue(sft.out().contains("example 0:") && sft.out().contains("example 1:")
                && !sft.out().contains("example 2:"), sft.out());
        assertTrue(sft.out().matches("(?s).*\\[[^\\]]+\\(\\d+\\)\\].*"), "a trained token as [text(id)]: " + sft.out());
        assertTrue(sft.out().contains("trained on ("), sft.out());
        PeftParityTest.Run dpo = PeftParityTest.finetune("preprocess",
                MainProcessTest.repoRoot().resolve("configs/quickstart-dpo.yaml").toString(), "--debug", "1",
                "output_dir=" + work.resolve("dpo"));
        assertEquals(0, dpo.exit(), dpo.err());
        assertTrue(dpo.out().contains("example 0 (chosen):"), dpo.out());
    }
}
