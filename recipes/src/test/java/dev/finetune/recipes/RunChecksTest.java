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
                + "(CPU, 1 rank): it runs 32-bit AdamW and SGD", single.get(0).message());
        assertTrue(single.get(0).where().endsWith("r.yaml:6:12"), single.get(0).where());
        // one GPU: the torch worker, with bitsandbytes' class (whether it is installed is the machine's to say)
        ValidatedRecipe.load(recipe, List.of(), LaunchShape.gpus(1, null, 80L << 30));
        // two GPUs: FSDP2 would hand bitsandbytes shards
        List<Finding> fsdp = errors(recipe, LaunchShape.gpus(2, null, 80L << 30));
        assertEquals(1, fsdp.size(), fsdp.toString());
        assertTrue(fsdp.get(0).message().startsWith("paged_adamw_8bit over 2 ranks is unsupported"), fsdp.toString());
        // sgd: the HF Trainer's torch.optim.SGD, on both trainers
        ValidatedRecipe.load(write(dir, "optimizer: sgd\n"), List.of(), LaunchShape.gpus(1, null, 80L << 30));
        ValidatedRecipe.load(write(dir, "optimizer: sgd\n"), List.of(), LaunchShape.RECIPE);
        // torchao's 8-bit AdamW: no trainer has it
        List<Finding> torchao = errors(write(dir, "optimizer: adamw_torch_8bit\n"), LaunchShape.gpus(1, null, 80L << 30));
        assertTrue(torchao.get(0).message().startsWith("optimizer: adamw_torch_8bit is unsupported: it is not in the "
                + "torch worker"), torchao.toString());
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

    /** #21: what the torch worker would not carry out is refused at its key, not run as something else. */
    @Test
    void fsdpSettingsTheWorkerLacksAreRefusedAtTheirKeys(@TempDir Path dir) throws IOException {
        LaunchShape twoGpus = LaunchShape.gpus(2, null, 80L << 30);
        List<Finding> local = errors(write(dir, "fsdp_version: 2\nfsdp_config:\n  state_dict_type: LOCAL_STATE_DICT\n"),
                twoGpus);
        assertEquals(1, local.size(), local.toString());
        assertTrue(local.get(0).message().startsWith("fsdp_config.state_dict_type: LOCAL_STATE_DICT is unsupported"),
                local.toString());
        assertTrue(local.get(0).where().endsWith("r.yaml:8:20"), local.get(0).where());
        List<Finding> size = errors(write(dir, "fsdp_version: 2\nfsdp_config:\n  auto_wrap_policy: SIZE_BASED_WRAP\n"
                + "  min_num_params: 100000\n"), twoGpus);
        assertEquals(2, size.size(), size.toString());
        assertTrue(size.stream().anyMatch(f -> f.message().startsWith("fsdp_config.auto_wrap_policy: SIZE_BASED_WRAP "
                + "is unsupported")), size.toString());
        assertTrue(size.stream().anyMatch(f -> f.where().endsWith("r.yaml:9:3")), size.toString());
        // what the worker honours loads
        ValidatedRecipe.load(write(dir, "fsdp_version: 2\nfsdp_config:\n  state_dict_type: SHARDED_STATE_DICT\n"
                + "  auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  transformer_layer_cls_to_wrap: LlamaDecoderLayer\n"
                + "save_only_model: true\n"), List.of(), twoGpus);
        // save_only_model on the JVM trainer: a warning, its checkpoints hold everything
        List<Finding> warnings = ValidatedRecipe.load(write(dir, "save_only_model: true\n"), List.of(),
                LaunchShape.RECIPE).warnings();
        assertTrue(warnings.stream().anyMatch(w -> w.message().startsWith("save_only_model has no effect on the "
                + "single-device trainer")), warnings.toString());
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
        assertTrue(hub.describe().endsWith("run: fsdp worker (torchrun) on CUDA, 2 ranks\n"), hub.describe());
        assertEquals("checked when the run starts, not here: base_model "
                + "'org/model' from the Hugging Face cache or the hub (its files, and access to them); its architecture "
                + "(config.json, which neither the cache nor the built-in table holds): a family finetune trains, and "
                + "lora_target_modules against its modules; the worker's Python with "
                + "torch, transformers and peft; 2 CUDA devices on each node\n", hub.leftToTheRun());
        ValidatedRecipe local = ValidatedRecipe.load(write(dir, "hardware: cpu\n"), List.of("base_model=" + STORIES));
        assertTrue(local.describe().endsWith("run: single-device trainer (this JVM) on CPU, 1 rank\n"));
        assertEquals("", local.leftToTheRun());
        // a hub model of the built-in table: its files are the run's, its architecture validate has read
        ValidatedRecipe table = ValidatedRecipe.load(write(dir, "hardware: cpu\n"),
                List.of("base_model=meta-llama/Llama-3.2-1B"));
        assertEquals("checked when the run starts, not here: base_model 'meta-llama/Llama-3.2-1B' from the Hugging "
                + "Face cache or the hub (its files, and access to them)\n", table.leftToTheRun());
    }

    @Test
    void aDpoLossTheWorkerLacksIsRefusedByItsDeclaredCapabilities(@TempDir Path dir) throws IOException {
        Path recipe = dpo(dir, "nca_pair");
        // this machine's CPU: the JVM trainer, which runs every TRL loss type
        ValidatedRecipe.load(recipe, List.of(), LaunchShape.RECIPE);
        List<Finding> gpu = errors(recipe, LaunchShape.gpus(1, null, 80L << 30));
        assertEquals(1, gpu.size(), gpu.toString());
        assertEquals("dpo_loss_type nca_pair is unsupported by the torch worker, where this recipe runs (CUDA, 1 rank): "
                + "it implements " + String.join(", ", WorkerCapabilities.declared().dpoLossTypes()),
                gpu.get(0).message());
        assertTrue(gpu.get(0).where().endsWith("r.yaml:7:16"), gpu.get(0).where());
        ValidatedRecipe.load(dpo(dir, "ipo"), List.of(), LaunchShape.gpus(1, null, 80L << 30));
    }

    private static Path dpo(Path dir, String lossType) throws IOException {
        Path recipe = write(dir, "rl: dpo\ndpo_loss_type: [" + lossType + "]\n");
        Files.writeString(recipe, Files.readString(recipe).replace("type: alpaca", "type: passthrough"));
        return recipe;
    }

    @Test
    void datasetPreparedPathIsSaidUnusedWhereTheJvmTrainerRunsIt(@TempDir Path dir) throws IOException {
        Path recipe = write(dir, "dataset_prepared_path: last_run_prepared\n");
        List<Finding> warnings = ValidatedRecipe.load(recipe, List.of(), LaunchShape.RECIPE).warnings();
        assertTrue(warnings.stream().anyMatch(w -> w.message().startsWith("dataset_prepared_path is not used by the "
                + "single-device trainer") && w.where().endsWith("r.yaml:6:24")), warnings.toString());
        // the worker caches its packed batches there: nothing to say
        List<Finding> worker = ValidatedRecipe.load(recipe, List.of(), LaunchShape.gpus(1, null, 80L << 30)).warnings();
        assertTrue(worker.stream().noneMatch(w -> w.message().contains("dataset_prepared_path")), worker.toString());
    }

    @Test
    void aChatTemplateIsOneFinetuneRenders(@TempDir Path dir) throws IOException {
        // Axolotl's schema takes tokenizer_default_fallback_<name> at the top level too
        ValidatedRecipe.load(write(dir, "chat_template: tokenizer_default_fallback_chatml\n"), List.of());
        List<Finding> cohere = errors(write(dir, "chat_template: cohere\n"), LaunchShape.RECIPE);
        assertEquals(1, cohere.size(), cohere.toString());
        assertTrue(cohere.get(0).message().startsWith("chat_template cohere is unsupported: finetune ships alpaca, "),
                cohere.toString());
        List<Finding> fallback = errors(write(dir, "chat_template: tokenizer_default_fallback_cohere\n"),
                LaunchShape.RECIPE);
        assertEquals(1, fallback.size(), fallback.toString());
        List<Finding> typo = errors(write(dir, "chat_template: chatm1\n"), LaunchShape.RECIPE);
        assertEquals("did you mean 'chatml'?", typo.get(0).hint(), typo.toString());
    }

    @Test
    void dropoutOnExpertLoraIsRefusedAtItsLineWhereTheWorkerStartsPeftsAdapter(@TempDir Path dir) throws IOException {
        Path mixtral = Files.createDirectories(dir.resolve("tiny-mixtral"));
        Files.writeString(mixtral.resolve("config.json"), """
                {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 32,
                 "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "vocab_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
                 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false}
                """);
        Path recipe = write(dir, "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_dropout: 0.05\n"
                + "lora_target_linear: true\ntokenizer_config: " + STORIES + "\n");
        Files.writeString(recipe, Files.readString(recipe).replace("base_model: org/model", "base_model: " + mixtral));
        for (LaunchShape shape : List.of(LaunchShape.RECIPE, LaunchShape.gpus(1, null, 80L << 30))) {
            List<Finding> found = errors(recipe, shape);
            assertEquals(1, found.size(), found.toString());
            assertTrue(found.get(0).message().startsWith("lora_dropout 0.05 with LoRA on mixtral's experts or router "
                    + "is unsupported"), found.toString());
            assertTrue(found.get(0).where().endsWith("r.yaml:9:15"), found.get(0).where());
        }
        // attention and dense projections only: PEFT's LoRA layers, which drop out their input
        ValidatedRecipe.load(write(dir, "adapter: lora\nlora_r: 8\nlora_alpha: 16\nlora_dropout: 0.05\n"
                + "lora_target_modules: [q_proj, v_proj]\ntokenizer_config: " + STORIES + "\n"), List.of(
                "base_model=" + mixtral), LaunchShape.RECIPE);
        ValidatedRecipe.load(recipe, List.of("lora_dropout=0"), LaunchShape.RECIPE);
    }
}
