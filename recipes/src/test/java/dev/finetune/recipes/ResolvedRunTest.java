package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.plan.PrecisionRegime;
import dev.finetune.recipes.plan.Sharding;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The run's decisions, made once from the recipe and the launch shape, as every command reads them. */
class ResolvedRunTest {

    static final Path QUICKSTART = RecipeLoadingTest.repoRoot().resolve("configs/quickstart.yaml");

    static ValidatedRecipe quickstart(LaunchShape shape, String... overrides) {
        return ValidatedRecipe.load(QUICKSTART, List.of(overrides), shape);
    }

    @Test
    void theQuickstartRunsInThisJvmOnOneCpu() {
        ValidatedRecipe v = quickstart(LaunchShape.RECIPE);
        ResolvedRun run = v.run();
        assertEquals(ResolvedRun.Backend.SINGLE, run.backend());
        assertEquals(ResolvedRun.Device.CPU, run.device());
        assertEquals(1, run.worldSize());
        assertEquals(PrecisionRegime.FP32, run.precision());
        assertInstanceOf(ReferenceModel.None.class, run.reference());
        assertEquals(1, v.plan().dataParallelRanks());
    }

    /** The batch line printed before a 2-rank run is the 2-rank one: the ranks come from the launch flags. */
    @Test
    void launchFlagsSetTheRanksOfTheBatchPlan() {
        ValidatedRecipe two = quickstart(LaunchShape.torchrun(2, null), "backend=fsdp");
        assertEquals(ResolvedRun.Backend.FSDP, two.run().backend());
        assertEquals(ResolvedRun.Device.CPU, two.run().device(), "hardware: cpu: CPU ranks over gloo");
        assertEquals(2, two.plan().dataParallelRanks());
        assertEquals(8, two.plan().global());
        assertTrue(two.describe().startsWith("batch: micro 4 x ranks 2 x accumulation 1 = global 8\n"),
                two.describe());
        assertEquals(2, two.run().devices().devices());
        // 324 train rows over 2 ranks: 162 each, 41 micro batches of 4 per epoch, 2 epochs
        assertEquals(82L, two.plan().schedule().totalSteps());

        ValidatedRecipe sixteen = quickstart(LaunchShape.torchrun(8, 2), "backend=fsdp");
        assertEquals(16, sixteen.run().worldSize());
        assertEquals(64, sixteen.plan().global());
        assertEquals(Sharding.FSDP_FULL_SHARD, sixteen.run().sharding(sixteen.recipe()));
    }

    @Test
    void autoPicksTheWorkerForLaunchFlagsAndSeveralDevices() {
        assertEquals(ResolvedRun.Backend.FSDP, quickstart(LaunchShape.torchrun(1, null), "backend=auto").run().backend(),
                "--nproc-per-node asks for torchrun, even for one rank");
        assertEquals(ResolvedRun.Backend.SINGLE, quickstart(LaunchShape.RECIPE, "backend=auto").run().backend());
        ValidatedRecipe gpus = quickstart(LaunchShape.RECIPE, "backend=auto", "hardware={gpus: 4, gpu_memory: 24GiB}");
        assertEquals(ResolvedRun.Backend.FSDP, gpus.run().backend());
        assertEquals(ResolvedRun.Device.CUDA, gpus.run().device());
        assertEquals(4, gpus.plan().dataParallelRanks());
        ValidatedRecipe planned = quickstart(LaunchShape.gpus(8, 2, 80L << 30), "backend=auto");
        assertEquals(16, planned.run().worldSize(), "plan --gpus 8 --nodes 2");
        assertEquals(ResolvedRun.Device.CUDA, planned.run().device());
    }

    /** {@code finetune generate}'s engine, decided by the same rule: the in-JVM model where it implements the family. */
    @Test
    void generateGoesToTheWorkerForAFamilyTheJvmDoesNotRun() {
        var gemma = dev.finetune.recipes.model.KnownModels.lookup("google/gemma-2-2b").orElseThrow();
        ResolvedRun worker = ResolvedRun.forGeneration(gemma);
        assertEquals(ResolvedRun.Backend.FSDP, worker.backend());
        assertEquals(ResolvedRun.Device.CPU, worker.device());
        assertTrue(worker.describeGeneration(gemma).startsWith("run: generate with the torch worker (transformers, one "
                + "process, no torchrun) on CPU, float32: the single-device (in-JVM) trainer implements"), worker
                .describeGeneration(gemma));
        var llama = dev.finetune.recipes.model.KnownModels.lookup("meta-llama/Llama-3.2-1B").orElseThrow();
        assertEquals("run: generate with the in-JVM model (this JVM) on CPU, float32\n",
                ResolvedRun.forGeneration(llama).describeGeneration(llama));
    }

    /**
     * A family the JVM trainer does not implement (here from the built-in table) goes to the worker at world size 1
     * under {@code auto}; {@code backend: single} is refused at validate, naming the families it runs and the backend
     * that runs this one; QLoRA on the CPU (the JVM trainer's there) too, and on a GPU it is the worker's.
     */
    @Test
    void autoGivesTheWorkerAFamilyTheJvmDoesNotRun() {
        ValidatedRecipe gemma = quickstart(LaunchShape.RECIPE, "backend=auto", "base_model=google/gemma-2-2b");
        assertEquals(ResolvedRun.Backend.FSDP, gemma.run().backend());
        assertEquals(ResolvedRun.Device.CPU, gemma.run().device());
        assertEquals(1, gemma.run().worldSize());
        assertEquals("run: torch worker (one process, no torchrun) on CPU, 1 rank\n", gemma.run().describe());
        assertEquals(ResolvedRun.Backend.SINGLE,
                quickstart(LaunchShape.RECIPE, "backend=auto", "base_model=meta-llama/Llama-3.2-1B").run().backend());

        InvalidRecipe single = assertThrows(InvalidRecipe.class,
                () -> quickstart(LaunchShape.RECIPE, "backend=single", "base_model=microsoft/phi-4"));
        String line = single.errors().get(0).oneLine();
        assertTrue(line.startsWith("override 'backend=single': the single-device (in-JVM) trainer implements llama, "
                + "mistral, qwen2, qwen3, not phi3 (Phi-3/3.5/4)"), line);
        assertTrue(single.errors().get(0).hint().contains("backend: fsdp"), single.errors().get(0).hint());

        InvalidRecipe qlora = assertThrows(InvalidRecipe.class, () -> quickstart(LaunchShape.RECIPE, "backend=auto",
                "base_model=mistralai/Mixtral-8x7B-v0.1", "adapter=qlora", "load_in_4bit=true"));
        assertEquals(1, qlora.errors().size(), qlora.getMessage());
        assertTrue(qlora.errors().get(0).oneLine().contains("QLoRA on this model is unsupported on the CPU: QLoRA runs "
                + "on the CPU in the single-device trainer only, and the single-device (in-JVM) trainer implements"),
                qlora.errors().get(0).oneLine());
        ValidatedRecipe qloraOnGpu = quickstart(LaunchShape.RECIPE, "backend=auto", "base_model=mistralai/Mixtral-8x7B-v0.1",
                "adapter=qlora", "load_in_4bit=true", "hardware={gpus: 1, gpu_memory: 80GiB}");
        assertEquals(ResolvedRun.Backend.FSDP, qloraOnGpu.run().backend(), "bitsandbytes' QLoRA on the worker");
    }

    /**
     * The JVM trainer computes on the CPU only, so a CUDA device is the torch worker's, one GPU included: one process
     * at world size 1 (no torchrun); backend: single keeps meaning one device, and only the CPU keeps this JVM.
     */
    @Test
    void oneGpuIsTheTorchWorkersAtWorldSizeOne() {
        for (String backend : List.of("auto", "single")) {
            ValidatedRecipe gpu = quickstart(LaunchShape.RECIPE, "backend=" + backend,
                    "hardware={gpus: 1, gpu_type: H100}");
            assertEquals(ResolvedRun.Backend.FSDP, gpu.run().backend(), backend);
            assertEquals(ResolvedRun.Device.CUDA, gpu.run().device());
            assertEquals(1, gpu.run().worldSize());
            assertEquals(Sharding.SINGLE, gpu.run().sharding(gpu.recipe()), "one process shards nothing");
            assertEquals(PrecisionRegime.MIXED_FP32_MASTER, gpu.run().precision(), "bf16 on the GPU, fp32 adapters");
            assertEquals("run: torch worker (one process, no torchrun) on CUDA, 1 rank\n", gpu.run().describe());
        }
        ValidatedRecipe planned = quickstart(LaunchShape.gpus(1, null, 80L << 30));
        assertEquals(ResolvedRun.Backend.FSDP, planned.run().backend(), "plan --gpus 1");
        assertEquals(ResolvedRun.Backend.SINGLE, quickstart(LaunchShape.RECIPE, "hardware={gpus: 1, gpu_type: H100}")
                .launchedAs(new LaunchShape(null, null, null, null, null, true)).run().backend(), "plan --cpu");
        InvalidRecipe two = assertThrows(InvalidRecipe.class, () -> quickstart(LaunchShape.torchrun(2, null),
                "backend=single", "hardware={gpus: 1, gpu_type: H100}"));
        assertTrue(two.errors().get(0).oneLine().contains("backend: single means one device, and the launch asks for "
                + "2 ranks"), two.errors().get(0).oneLine());
    }

    @Test
    void theSingleDeviceBackendRefusesLaunchFlags() {
        InvalidRecipe e = assertThrows(InvalidRecipe.class, () -> quickstart(LaunchShape.torchrun(2, null)));
        assertTrue(e.errors().get(0).oneLine().contains("--nproc-per-node and --nnodes belong to the fsdp backend"),
                e.errors().get(0).oneLine());
        InvalidRecipe disagree = assertThrows(InvalidRecipe.class,
                () -> quickstart(LaunchShape.gpus(8, null, 80L << 30).withTorchrun(4, null), "backend=fsdp"));
        assertTrue(disagree.errors().get(0).oneLine().contains("--nproc-per-node 4 and --gpus 8 disagree"),
                disagree.errors().get(0).oneLine());
        UserError zero = assertThrows(UserError.class, () -> LaunchShape.torchrun(0, null));
        assertTrue(zero.oneLine().startsWith("--nproc-per-node: must be from 1"), zero.oneLine());
    }

    /** A 2-rank GRPO run checks its generation batch against 2 ranks, at validation. */
    @Test
    void rankRulesOfTheBatchPlanSeeTheLaunchedRanks() {
        Path grpo = RecipeLoadingTest.repoRoot().resolve("configs/quickstart-grpo.yaml");
        ValidatedRecipe two = ValidatedRecipe.load(grpo, List.of("backend=fsdp"), LaunchShape.torchrun(2, null));
        assertEquals(2, two.plan().dataParallelRanks());
        InvalidRecipe three = assertThrows(InvalidRecipe.class, () -> ValidatedRecipe.load(grpo,
                List.of("backend=fsdp"), LaunchShape.torchrun(3, null)));
        assertTrue(three.errors().get(0).oneLine().contains("smaller than num_generations x ranks = 12"),
                three.errors().get(0).oneLine());
    }

    @Test
    void theReferenceModelIsDecidedOnceAsTrlDecidesIt() {
        AdapterSpec lora = new AdapterSpec.Lora(8, 16, 0, List.of(), true, false, null);
        Recipe.Objective dpo = new Recipe.Objective.Dpo(0.1, 0, false, DpoLossType.SIGMOID);
        assertInstanceOf(ReferenceModel.None.class, ReferenceModel.of(new Recipe.Objective.Sft(), lora, null));
        assertInstanceOf(ReferenceModel.AdapterDisabled.class, ReferenceModel.of(dpo, lora, null));
        assertEquals(new ReferenceModel.FrozenAdapter("sft-out"), ReferenceModel.of(dpo, lora, "sft-out"));
        assertInstanceOf(ReferenceModel.StartingWeights.class, ReferenceModel.of(dpo, new AdapterSpec.Full(), null));
    }

    @Test
    void precisionFollowsTheTrainerThatRunsIt() {
        assertEquals(PrecisionRegime.CPU_BF16_AUTOCAST, quickstart(LaunchShape.RECIPE, "bf16=true").run().precision(),
                "the JVM trainer's bf16 autocast");
        assertEquals(PrecisionRegime.FP32, quickstart(LaunchShape.torchrun(2, null), "bf16=true", "backend=fsdp").run()
                .precision(), "the worker computes in fp32 on CPU");
        ValidatedRecipe gpu = quickstart(LaunchShape.RECIPE, "backend=fsdp", "hardware={gpus: 2, gpu_memory: 80GiB}");
        assertEquals(PrecisionRegime.MIXED_FP32_MASTER, gpu.run().precision(), "bf16: auto means bf16 on a GPU");
        assertTrue(gpu.run().bfloat16Compute());
        // the worker on CPU ranks stores and computes as precision: names, and plan.json's compute_dtype says the same
        ValidatedRecipe cpuBf16 = quickstart(LaunchShape.RECIPE, "backend=fsdp", "precision=bf16");
        assertEquals(PrecisionRegime.BF16_PURE, cpuBf16.run().precision());
        assertTrue(cpuBf16.run().bfloat16Compute(), "precision: bf16 computes in bfloat16 on CPU ranks too");
        assertTrue(!quickstart(LaunchShape.RECIPE, "bf16=true").run().bfloat16Compute(),
                "the JVM trainer's autocast is not the worker's compute dtype");
    }

    /** Precision the trainer that runs the recipe would not carry out is refused with it, at the key's line. */
    @Test
    void precisionNoTrainerCarriesOutIsRefused() {
        InvalidRecipe cpu = assertThrows(InvalidRecipe.class, () -> quickstart(LaunchShape.RECIPE, "fp16=true"));
        assertEquals(1, cpu.errors().size(), cpu.errors().toString());
        assertEquals("fp16: true (float16 compute with loss scaling) is unsupported by the single-device trainer, "
                + "where this recipe runs (CPU): it computes in bfloat16 or float32", cpu.errors().get(0).message());
        InvalidRecipe gpu = assertThrows(InvalidRecipe.class, () -> quickstart(LaunchShape.RECIPE, "fp16=true",
                "hardware={gpus: 1, gpu_memory: 16GiB}"));
        assertEquals(1, gpu.errors().size(), gpu.errors().toString());
        assertTrue(gpu.errors().get(0).message().contains("unsupported by the torch worker, where this recipe runs "
                + "(CUDA)"), gpu.errors().toString());
        assertTrue(gpu.errors().get(0).hint().startsWith("use bf16: true on a GPU with bfloat16"), gpu.errors().toString());
        // both true: the reader's one error, not a second one at the same line
        InvalidRecipe both = assertThrows(InvalidRecipe.class, () -> quickstart(LaunchShape.RECIPE, "fp16=true",
                "bf16=true"));
        assertEquals(1, both.errors().size(), both.errors().toString());

        InvalidRecipe single = assertThrows(InvalidRecipe.class, () -> quickstart(LaunchShape.RECIPE,
                "precision=bf16"));
        assertEquals(1, single.errors().size(), single.errors().toString());
        assertTrue(single.errors().get(0).message().startsWith("precision: bf16 is a regime of the torch worker, and "
                + "this recipe runs on the single-device trainer (CPU)"), single.errors().toString());
        assertEquals(PrecisionRegime.FP32, quickstart(LaunchShape.RECIPE, "precision=fp32").run().precision(),
                "fp32 is what the JVM trainer keeps: accepted");
    }
}
