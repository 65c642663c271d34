package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code finetune configs} on a team's own recipe folder, by {@code --dir} and by the environment variable. */
class ConfigsDirTest {

    @Test
    void lsCatAndCpWorkOnAFolderGivenByDir(@TempDir Path dir) throws Exception {
        Path recipes = ValidateManyTest.repository(dir);
        InProcess.Run ls = InProcess.finetune("configs", "--dir", recipes.toString(), "ls");
        assertEquals(0, ls.exit(), ls.err());
        List<String> lines = ls.out().lines().toList();
        assertEquals(List.of("common", "full/full", "lora", "typo"), lines.stream().map(l -> l.split("\\s+")[0]).toList(), ls.out());
        assertTrue(lines.get(0).endsWith("(fragment) Shared settings of our story recipes."), lines.get(0));
        assertTrue(lines.get(2).endsWith(" LoRA on the story model."), lines.get(2));

        InProcess.Run cat = InProcess.finetune("configs", "--dir", recipes.toString(), "cat", "full/full");
        assertEquals(Files.readString(recipes.resolve("full/full.yml")), cat.out());

        Path copy = dir.resolve("elsewhere/mine.yaml");
        Files.createDirectories(copy.getParent());
        InProcess.Run cp = InProcess.finetune("configs", "--dir", recipes.toString(), "cp", "lora", copy.toString());
        assertEquals(0, cp.exit(), cp.err());
        // Copied elsewhere, the recipe keeps its description and still validates: its data path was re-pointed.
        assertTrue(Files.readString(copy).startsWith("# LoRA on the story model.\n"), Files.readString(copy));
        assertEquals(0, InProcess.finetune("validate", copy.toString()).exit());

        InProcess.Run missing = InProcess.finetune("configs", "--dir", recipes.toString(), "cat", "nope");
        assertEquals(2, missing.exit());
        assertTrue(missing.err().contains("no such recipe in " + recipes), missing.err());
    }

    @Test
    void theEnvironmentVariableSetsTheDefaultLibrary(@TempDir Path dir) throws Exception {
        Path recipes = ValidateManyTest.repository(dir);
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:TieredStopAtLevel=1", "-Dfinetune.home=" + MainProcessTest.repoRoot(),
                "-cp", System.getProperty("java.class.path"), Main.class.getName(), "configs", "ls"));
        ProcessBuilder builder = new ProcessBuilder(command).directory(dir.toFile()).redirectErrorStream(true);
        builder.environment().put(ConfigsCommand.ENV, recipes.toString());
        Process p = builder.start();
        String out = new String(p.getInputStream().readAllBytes());
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("full/full") && out.contains("LoRA on the story model."), out);
        assertTrue(!out.contains("quickstart"), "the shipped library is not listed: " + out);
    }
}
