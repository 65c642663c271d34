package dev.finetune.trainers.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The training benchmark's harness on the peer's TINY shape: its figures line and the counts it reports. */
class TrainingBenchTest {

    @Test
    void tinyLoraPrintsThePeerLineWithTheShapesParameterCounts() throws Exception {
        StringWriter text = new StringWriter();
        BenchShape tiny = BenchShape.TINY;
        TrainingBench.run(new TrainingBench.Settings(tiny, TrainingBench.Mode.LORA, 2, 1, false, null, 0, false),
                new PrintWriter(text));
        List<String> lines = text.toString().lines().toList();
        assertEquals(1, lines.stream().filter(l -> l.contains(" warmup ms=")).count(), text.toString());
        assertEquals(2, lines.stream().filter(l -> l.contains(" timed ms=")).count(), text.toString());
        String last = lines.get(lines.size() - 1);
        assertTrue(last.startsWith("finetune tokens_per_s="), last);
        Map<String, String> fields = new HashMap<>();
        for (String pair : last.substring("finetune ".length()).split(" ")) {
            String[] kv = pair.split("=", 2);
            fields.put(kv[0], kv[1]);
        }
        int headDim = tiny.dim / tiny.heads;
        int kv = tiny.kvHeads * headDim;
        // LoRA r=8 adds r·(in + out) per projection: q, o (dim→dim), k, v (dim→kv), gate, up (dim→ffn), down (ffn→dim).
        long perLayer = 8L * (2 * (tiny.dim + tiny.dim) + 2 * (tiny.dim + kv) + 3 * (tiny.dim + tiny.ffn));
        assertEquals(perLayer * tiny.layers, Long.parseLong(fields.get("trainable")));
        assertEquals(tiny.matmulParams(), Long.parseLong(fields.get("matmul_params")));
        assertEquals("2", fields.get("steps"));
        assertEquals("lora", fields.get("mode"));
        // Random weights predict nearly uniformly: the first loss is close to ln(vocab).
        double first = Double.parseDouble(fields.get("loss_first"));
        assertEquals(Math.log(tiny.vocab), first, 0.5, last);
        assertTrue(Double.parseDouble(fields.get("tokens_per_s")) > 0, last);
    }
}
