package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code validate} resolves the trainer and device that will run the recipe (its {@code hardware:}, {@code backend:}
 * and the command line's {@code --gpus}, as the run does) and refuses at the key's line what that trainer refuses.
 */
class RunChecksTest {
    static final Path STORIES = Path.of("..", "configs", "models", "stories260K").toAbsolutePath().normalize();

    static Path write(Path dir, String extra) throws IOException {
        Files.writeString(dir.resolve("d.jsonl"), "{\"instruction\": \"a\", \"output\": \"b\"}\n");
        Files.writeString(dir.resolve("r.yaml"), WarningsTest.BASE + extra);
        return dir.resolve("r.yaml");
    }

    static List<Finding> errors(Path file, LaunchShape shape) {
        return assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(file, List.of(), shape)).errors();
    }

    @Test
    void anOptimizerTheResolvedTrainerLacksIsRefusedAtItsLine(@TempDir Path dir) throws IOException {
        // no hardware: this machine's CPU, the single-device trainer (the run's own resolution, not hardware: cpu)
        Path recipe = write(dir, "optimizer: paged_adamw_8bit\n");
        List<Finding> single = errors(recipe, LaunchShape.RECIPE);
        assertEquals(1, single.size(), single.toString());
        assertEquals("optimizer paged_adamw_8bit is unsupported by the single-device trainer, where this recipe runs "
                + "(CPU, 1 rank): it runs 32-bit AdamW", single.get(0).message());
        assertTrue(single.get(0).where().endsWith("r.yaml:6:12"), single.get(0).where());
        // one GPU: the torch worker, with bitsandbytes' class (whether it is installed is the machine's to say)
        ValidatedRecipe.load(recipe, List.of(), LaunchShape.gpus(1, null, 80L << 30));
        // two GPUs: FSDP2 would hand bitsandbytes shards
        List<Finding> fsdp = errors(recipe, LaunchShape.gpus(2, null, 80L << 30));
        assertEquals(1, fsdp.size(), fsdp.toString());
        assertTrue(fsdp.get(0).message().startsWith("paged_adamw_8bit over 2 ranks is unsupported"), fsdp.toString());
        // sgd: neither trainer has it; the worker would have run AdamW in its place
        List<Finding> sgd = errors(write(dir, "optimizer: sgd\n"), LaunchShape.gpus(1, null, 80L << 30));
        assertTrue(sgd.get(0).message().startsWith("optimizer: sgd is unsupported: it is not in the torch worker"),
                sgd.toString());
        // paging moves 32-bit moments, the update is AdamW's: the JVM trainer runs it
        ValidatedRecipe.load(write(dir, "optimizer: paged_adamw_32bit\n"), List.of(), LaunchShape.RECIPE);
    }

    @Test
    void qloraIsRefusedWhereTheWorkerWouldShardItOrRunItOnTheCpu(@TempDir Path dir) throws IOException {
        Path recipe = write(dir, "adapter: qlora\nload_in_4bit: true\nlora_r: 8\nlora_alpha: 16\nlora_target_linear: true\n");
        ValidatedRecipe.load(recipe, List.of(), LaunchShape.RECIPE); // the CPU: the JVM trainer's NF4 QLoRA
        ValidatedRecipe.load(recipe, List.of(), LaunchShape.gpus(1, null, 80L << 30)); // one GPU: the worker's
        List<Finding> fsdp = errors(recipe, LaunchShape.gpus(4, null, 80L << 30));
        assertEquals(1, fsdp.size(), fsdp.toString());
        assertTrue(fsdp.get(0).message().startsWith("QLoRA over 4 ranks is unsupported: FSDP2 gathers"), fsdp.toString());
        assertTrue(fsdp.get(0).where().endsWith("r.yaml:6:10"), fsdp.get(0).where());
        List<Finding> cpuWorker = errors(recipe, LaunchShape.torchrun(1, null));
        assertTrue(cpuWorker.get(0).message().startsWith("adapter: qlora on the torch worker is unsupported on the CPU"),
                cpuWorker.toString());
    }

    @Test
    void tokenizerDefaultWithALocalModelWithoutATemplateIsRefused(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("c.jsonl"), "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n");
        String recipe = WarningsTest.BASE.replace("org/model", STORIES.toString())
                .replace("d.jsonl, type: alpaca", "c.jsonl, type: chat_template");
        Files.writeString(dir.resolve("r.yaml"), recipe);
        List<Finding> none = errors(dir.resolve("r.yaml"), LaunchShape.RECIPE);
        assertEquals(1, none.size(), none.toString());
        assertTrue(none.get(0).message().startsWith("chat_template is tokenizer_default but the model at "), none.toString());
        Files.writeString(dir.resolve("r.yaml"), recipe + "chat_template: chatml\n");
        ValidatedRecipe.load(dir.resolve("r.yaml"), List.of(), LaunchShape.RECIPE);
    }

    @Test
    void whatOnlyTheMachineKnowsIsSaid(@TempDir Path dir) throws IOException {
        ValidatedRecipe hub = ValidatedRecipe.load(write(dir, "hardware: {gpus: 2, gpu_memory: 80GiB}\n"), List.of());
        assertEquals("run: fsdp worker (torchrun) on CUDA, 2 ranks\nchecked when the run starts, not here: base_model "
                + "'org/model' from the Hugging Face cache or the hub (its files, and access to them); the worker's Python with "
                + "torch, transformers and peft, and the objectives and DPO loss types it reports; 2 CUDA devices on "
                + "each node\n", hub.describeRun());
        ValidatedRecipe local = ValidatedRecipe.load(write(dir, "hardware: cpu\n"), List.of("base_model=" + STORIES));
        assertEquals("run: single-device trainer (this JVM) on CPU, 1 rank\n", local.describeRun());
    }
}
