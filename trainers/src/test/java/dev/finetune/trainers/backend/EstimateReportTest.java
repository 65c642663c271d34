package dev.finetune.trainers.backend;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.recipes.plan.Phase;
import dev.finetune.recipes.plan.RunPlan;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The tensor line a worker run prints after its first step (FsdpEquivalenceTest sees real runs agree with the plan):
 * here the plan of a stories260K LoRA recipe against bytes that agree, and against one term 3 % over, which the line
 * must name, since a wrong term is what the comparison is for.
 */
class EstimateReportTest {
    private static final Path MODEL = Path.of("../configs/models/stories260K").toAbsolutePath().normalize();
    private static final double MIB = 1024.0 * 1024.0;

    @Test
    void theTensorLineNamesTheTermThatIsOffThePlan(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("rows.jsonl"), "{\"text\": \"a\"}\n");
        Path recipe = Files.writeString(dir.resolve("run.yaml"), "base_model: " + MODEL + """

                datasets: [{path: rows.jsonl, type: completion}]
                adapter: lora
                lora_r: 8
                lora_alpha: 16
                lora_target_linear: true
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                max_steps: 2
                learning_rate: 1e-3
                hardware: cpu
                output_dir: out
                """);
        RunPlan plan = RunPlan.of(ValidatedRecipe.load(recipe, List.of()), dir, null, null, null);
        Map<String, Long> planned = plan.memory().estimate().tensorTerms();
        assertEquals(List.of("weights", "adapter", "gradients", "optimizer_state"), List.copyOf(planned.keySet()));

        StringWriter text = new StringWriter();
        EstimateReport report = new EstimateReport(plan, new PrintWriter(text), 2);
        Map<String, Object> fields = report.tensors(1, planned, 400.0, "");
        String load = String.format(Locale.ROOT, "%.1f", plan.memory().estimate().total(Phase.LOAD) / MIB);
        assertTrue(text.toString().strip().endsWith(": all within 1 %; load peak 400.0 MiB (plan " + load + ")"),
                text.toString());
        planned.forEach((term, bytes) -> {
            assertEquals(bytes / MIB, fields.get("memory/" + term + "_mb"));
            assertEquals(bytes / MIB, fields.get("plan_memory/" + term + "_mb"));
        });
        assertEquals(400.0, fields.get("memory/load_peak_mb"));

        Map<String, Long> gradientsOver = new LinkedHashMap<>(planned);
        gradientsOver.put("gradients", Math.round(planned.get("gradients") * 1.03));
        text.getBuffer().setLength(0);
        report.tensors(1, gradientsOver, Double.NaN, "[largest of 2 ranks] ");
        String line = text.toString();
        assertTrue(line.startsWith("[largest of 2 ranks] tensors after step 1: weights "), line);
        assertTrue(line.strip().endsWith(": gradients off by +3.0 %"), line);
        assertFalse(line.contains("load peak"), line);
    }
}
