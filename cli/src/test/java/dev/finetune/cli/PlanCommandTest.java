package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code finetune plan} through the real entry point in a child JVM, on shipped configs and on a recipe that cannot fit. */
class PlanCommandTest {

    static Path config(String name) {
        return MainProcessTest.repoRoot().resolve("configs").resolve(name);
    }

    /**
     * The batch line and per-device plan printed before a multi-rank run are that run's: the ranks come from the launch
     * flags, the same for {@code plan} and for training's {@code --dry-run}.
     */
    @Test
    void launchFlagsGiveTheBatchLineAndPlanOfTheirRanks(@TempDir Path work) throws Exception {
        String quickstart = config("quickstart.yaml").toString();
        MainProcessTest.Run plan = MainProcessTest.run(work, "plan", quickstart, "backend=fsdp", "--nproc-per-node", "2");
        assertEquals(0, plan.exit(), plan.out() + plan.err());
        assertTrue(plan.out().startsWith("batch: micro 4 x ranks 2 x accumulation 1 = global 8\n"), plan.out());
        assertTrue(plan.out().contains("devices    2 CPU ranks (gloo)"), plan.out());
        assertTrue(plan.out().contains("260,032 frozen params × 4 B / 2 ranks"), plan.out());

        MainProcessTest.Run dryRun = MainProcessTest.run(work, quickstart, "backend=fsdp", "--nnodes", "2",
                "--nproc-per-node", "8", "--rdzv-endpoint", "node001:29500", "--dry-run");
        assertEquals(0, dryRun.exit(), dryRun.out() + dryRun.err());
        assertTrue(dryRun.out().startsWith("batch: micro 4 x ranks 16 x accumulation 1 = global 64\n"), dryRun.out());
        assertTrue(dryRun.out().contains("devices    2 nodes × 8 CPU ranks (gloo)"), dryRun.out());
        assertTrue(dryRun.out().contains("global batch: micro 4 x ranks 16 x accumulation 1 = 64 sequences"),
                dryRun.out());

        MainProcessTest.Run single = MainProcessTest.run(work, "plan", quickstart, "--nproc-per-node", "2");
        assertEquals(2, single.exit(), single.out() + single.err());
        assertTrue(single.err().contains("--nproc-per-node and --nnodes belong to the fsdp backend"), single.err());
    }

    @Test
    void shippedQloraRecipeFitsItsCard(@TempDir Path work) throws Exception {
        MainProcessTest.Run r = MainProcessTest.run(work, "plan", config("llama-3.1-8b/qlora-sft.yaml").toString());
        assertEquals(0, r.exit(), r.out() + r.err());
        assertTrue(r.out().contains("weights_nf4"), r.out());
        assertTrue(r.out().contains("verdict    fits"), r.out());
    }

    @Test
    void jsonCarriesPeakCapacityTermsAndBatch(@TempDir Path work) throws Exception {
        MainProcessTest.Run r = MainProcessTest.run(work, "plan", config("llama-3.1-70b/full-fsdp.yaml").toString(), "--json");
        JsonObject o = JsonParser.parseString(r.out()).getAsJsonObject();
        assertEquals(80L << 30, o.get("capacity_bytes").getAsLong());
        assertEquals(o.get("fits").getAsBoolean() ? 0 : 2, r.exit());
        assertTrue(o.getAsJsonObject("terms").has("fsdp_buffers"));
        assertEquals(8, o.getAsJsonObject("batch").get("ranks").getAsInt());
        assertEquals(o.getAsJsonObject("batch").get("micro").getAsInt() * 8 * o.getAsJsonObject("batch").get("accumulation").getAsInt(),
                o.getAsJsonObject("batch").get("global").getAsInt());
        assertTrue(o.get("time").isJsonNull(), "no GPU type, no time: " + o.get("time"));
        assertTrue(o.get("time_note").getAsString().contains("gpu_type"), o.get("time_note").getAsString());

        MainProcessTest.Run priced = MainProcessTest.run(work, "plan", config("llama-3.1-70b/full-fsdp.yaml").toString(), "--json",
                "hardware.gpu_type=H100", "hardware.cost_per_gpu_hour=2", "max_steps=100");
        JsonObject time = JsonParser.parseString(priced.out()).getAsJsonObject().getAsJsonObject("time");
        assertEquals(100, time.get("total_steps").getAsLong());
        assertEquals(8, time.get("devices").getAsInt());
        double wall = time.get("total_tokens").getAsDouble() / (time.get("tokens_per_second_per_device").getAsDouble() * 8);
        assertEquals(wall, time.get("wall_seconds").getAsDouble(), wall * 1e-9);
        assertEquals(wall / 3600 * 8 * 2, time.get("cost").getAsDouble(), 1e-6);
        assertEquals(time.get("tokens_per_second_per_device").getAsDouble() * time.get("flops_per_token").getAsDouble(),
                time.get("effective_flops").getAsDouble(), 1e3);
    }

    @Test
    void aRecipeThatCannotFitExitsTwoWithRankedRemedies(@TempDir Path work) throws Exception {
        MainProcessTest.Run r = MainProcessTest.run(work, "plan", config("llama-3.1-70b/full-fsdp.yaml").toString(),
                "--gpus", "1", "--gpu-memory", "80GiB");
        assertEquals(2, r.exit(), r.out() + r.err());
        assertTrue(r.out().contains("does not fit"), r.out());
        assertTrue(r.out().contains("1. "), r.out());
        assertFalse(r.err().contains("\tat "), r.err());
    }

    @Test
    void anUnknownRemoteModelAsksForItsConfig(@TempDir Path work) throws Exception {
        Path data = Files.writeString(work.resolve("data.jsonl"), "{\"text\": \"hello\"}\n");
        Path recipe = Files.writeString(work.resolve("r.yaml"), """
                base_model: someone/unreleased-model
                datasets:
                  - path: data.jsonl
                    type: completion
                sequence_len: 512
                micro_batch_size: 1
                gradient_accumulation_steps: 1
                learning_rate: 1e-5
                output_dir: out
                """);
        MainProcessTest.Run r = MainProcessTest.run(work, "plan", recipe.toString(), "--gpus", "1", "--gpu-memory", "24GiB");
        assertEquals(2, r.exit(), r.out() + r.err());
        assertTrue(r.err().contains("--model-config"), r.err());
        Path config = Files.writeString(work.resolve("config.json"), """
                {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                 "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000}""");
        MainProcessTest.Run withConfig = MainProcessTest.run(work, "plan", recipe.toString(), "--gpus", "1", "--gpu-memory", "24GiB",
                "--model-config", config.toString());
        assertEquals(0, withConfig.exit(), withConfig.out() + withConfig.err());
        assertTrue(withConfig.out().contains("1.10 B params"), withConfig.out());
        assertTrue(Files.isRegularFile(data));
    }
}
