package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.Kernels;
import dev.finetune.recipes.plan.MemoryEstimate;
import dev.finetune.recipes.plan.Phase;
import dev.finetune.recipes.plan.RunPlan;
import dev.finetune.recipes.plan.Term;
import dev.finetune.recipes.plan.TrainingSetup;
import dev.finetune.trainers.parity.PythonStack;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code gpu_check.py}'s plan columns come from {@code gpu_check_plan.json} beside it, which is finetune's own plan of
 * each case (the one-GPU cases, and the FSDP case on 2, 4 and 8 GPUs; step peak and load peak per device): this test asks the script for its cases ({@code gpu_check.py --cases}: model, micro batch,
 * sequence, LoRA rank, QLoRA, and what it runs them with), plans each as the recipe a user would write for one GPU, checks
 * that the plan resolves what the script runs (the worker at world size 1 on CUDA, its precision regime, optimizer,
 * the head inside the loss, eager layers), and fails when the committed file differs, leaving the fresh one in
 * {@code trainers/target/gpu_check_plan.json} to copy. It needs no GPU: the plan is arithmetic on the model's shape.
 */
class GpuCheckPlanTest {

    static final Path PYTHON_DIR = WorkerEnvironment.repoRoot().resolve("trainers/src/main/python");
    static final Path COMMITTED = PYTHON_DIR.resolve("gpu_check_plan.json");

    @Test
    void theCommittedPlanIsFinetunesPlanOfEveryCase(@TempDir Path tmp) throws Exception {
        WorkerEnvironment.python();
        String printed = PythonStack.runScript(PYTHON_DIR.resolve("gpu_check.py"), PYTHON_DIR, "--cases",
                tmp.resolve("models").toString());
        JsonArray cases = JsonParser.parseString(printed.substring(printed.indexOf('['))).getAsJsonArray();
        assertEquals(4 + 3, cases.size(), printed); // four one-GPU cases, the FSDP case on 2, 4 and 8 GPUs
        Map<String, Object> file = new LinkedHashMap<>();
        file.put("_", "finetune's plan of gpu_check.py's one-GPU cases, bytes per device; written by GpuCheckPlanTest "
                + "(trainers/src/test/java/.../fsdp): do not edit");
        List<String> mismatches = new ArrayList<>();
        for (JsonElement element : cases) {
            JsonObject c = element.getAsJsonObject();
            int gpus = c.get("gpus").getAsInt();
            String name = c.get("name").getAsString() + (gpus == 1 ? "" : " x" + gpus);
            String fileName = name.replace(' ', '-');
            ValidatedRecipe recipe = FsdpRuns.recipe(tmp, fileName, recipe(c, tmp.resolve("out-" + fileName)));
            ResolvedRun run = recipe.run();
            MemoryEstimate estimate = RunPlan.of(recipe, tmp, null, null, null).memory().estimate();
            TrainingSetup s = estimate.setup();
            String runs = run.backend() + " " + run.device() + " ×" + run.worldSize() + ", " + s.precision().key() + ", "
                    + s.optimizer().label() + ", " + s.kernels().loss() + ", " + s.kernels().layers() + ", checkpointing "
                    + s.gradientCheckpointing();
            String expected = "FSDP CUDA ×" + gpus + ", " + c.get("precision").getAsString() + ", "
                    + Optimizer.byName(c.get("optimizer").getAsString()).label() + ", "
                    + (c.get("head").getAsString().equals("chunked") ? Kernels.Loss.HEAD_INSIDE_CHUNKED : Kernels.Loss.FULL)
                    + ", " + (c.get("torch_compile").getAsBoolean() ? Kernels.Layers.FUSED : Kernels.Layers.EAGER)
                    + ", checkpointing " + c.get("gradient_checkpointing").getAsBoolean();
            if (!runs.equals(expected)) {
                mismatches.add(name + ": the plan runs " + runs + ", gpu_check.py runs " + expected);
            }
            Map<String, Object> entry = new LinkedHashMap<>();
            entry.put("peak_bytes", estimate.peakBytes());
            entry.put("peak_phase", estimate.peakPhase().label());
            if (estimate.phases().contains(Phase.LOAD)) {
                entry.put("load_peak_bytes", estimate.total(Phase.LOAD));
            }
            Map<String, Long> terms = new LinkedHashMap<>();
            for (Term t : estimate.terms()) {
                if (t.in(estimate.peakPhase()) > 0) {
                    terms.put(t.name(), t.in(estimate.peakPhase()));
                }
            }
            entry.put("terms", terms);
            file.put(name, entry);
        }
        assertEquals(List.of(), mismatches, "gpu_check.py's cases and the plan of their recipe disagree");
        String fresh = new GsonBuilder().setPrettyPrinting().disableHtmlEscaping().create().toJson(file) + "\n";
        String committed = Files.exists(COMMITTED) ? Files.readString(COMMITTED) : "";
        if (!committed.equals(fresh)) {
            Path written = WorkerEnvironment.repoRoot().resolve("trainers/target/gpu_check_plan.json");
            Files.createDirectories(written.getParent());
            Files.writeString(written, fresh);
            assertEquals(fresh, committed, "trainers/src/main/python/gpu_check_plan.json is stale: cp " + written + " "
                    + COMMITTED);
        }
    }

    /**
     * The recipe a user writes for one GPU to train what the case trains (its data only sizes the schedule). The card's
     * memory only decides whether the plan fits, never a term, so one file serves the H100s and H200s alike.
     */
    static String recipe(JsonObject c, Path out) {
        int r = c.get("r").getAsInt();
        boolean qlora = c.get("qlora").getAsBoolean();
        return """
                base_model: %s
                datasets:
                  - path: %s
                    type: completion
                output_dir: %s
                adapter: %s
                lora_r: %d
                lora_alpha: %d
                lora_dropout: 0.0
                lora_target_linear: true
                sequence_len: %d
                sample_packing: true
                micro_batch_size: %d
                gradient_accumulation_steps: %d
                max_steps: 20
                learning_rate: 2e-4
                bf16: true
                optimizer: %s
                gradient_checkpointing: %s
                torch_compile: %s
                hardware:
                  gpus: %d
                  gpu_memory: 80GiB
                """.formatted(c.get("model").getAsString(), WorkerEnvironment.data("quickstart.jsonl"), out,
                qlora ? "qlora\nload_in_4bit: true" : "lora", r, 2 * r, c.get("seq").getAsInt(), c.get("micro").getAsInt(),
                c.get("micro_batches_per_step").getAsInt(), c.get("optimizer").getAsString(),
                c.get("gradient_checkpointing").getAsBoolean(), c.get("torch_compile").getAsBoolean(),
                c.get("gpus").getAsInt());
    }
}
