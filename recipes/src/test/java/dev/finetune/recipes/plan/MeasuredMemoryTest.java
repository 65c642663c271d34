package dev.finetune.recipes.plan;

import dev.finetune.recipes.Optimizer;
import dev.finetune.recipes.ReferenceModel;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.model.KnownModels;
import dev.finetune.recipes.model.ModelConfig;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import org.junit.jupiter.api.Test;

/**
 * Our estimate against published peak-memory measurements (docs/memory-plan.md: checked against measurements). The setups are in
 * {@code memory-measured-setups.tsv}; the rows we cannot express, and the outliers with their reasons, in
 * {@code memory-outliers.md}. No constant in the model is fitted to a row.
 */
class MeasuredMemoryTest {

    static final double GIB = 1L << 30;
    static final double TOLERANCE = 0.25;
    static final List<String> ALL_LINEAR = List.of("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj");

    record Row(String id, TrainingSetup setup, String metric, double measuredGib, String note) {}

    @Test
    void atLeastThreeQuartersOfTheMeasuredRowsAreWithin25Percent() throws IOException {
        List<Row> rows = rows();
        int within = 0;
        List<String> outliers = new ArrayList<>();
        System.out.printf(Locale.ROOT, "%-6s %9s %9s %7s  %s%n", "row", "measured", "estimate", "error", "setting");
        for (Row row : rows) {
            double estimate = comparable(MemoryModel.estimate(row.setup()), row.metric()) / GIB;
            double error = estimate / row.measuredGib() - 1;
            boolean ok = Math.abs(error) <= TOLERANCE;
            within += ok ? 1 : 0;
            if (!ok) {
                outliers.add(row.id());
            }
            System.out.printf(Locale.ROOT, "%-6s %9.2f %9.2f %+6.0f%%%s  %s%n", row.id(), row.measuredGib(), estimate, 100 * error,
                    ok ? " " : "!", describe(row));
        }
        double share = within / (double) rows.size();
        System.out.printf(Locale.ROOT, "memory-measured: %d of %d rows within ±25 %% (%.0f %%); outliers: %s%n", within, rows.size(),
                100 * share, outliers);
        for (Row row : rows) {
            if (outliers.contains(row.id())) {
                System.out.println("\n" + row.id() + " (" + row.note() + "):\n" + PlanText.render(new MemoryPlan(MemoryModel.estimate(row.setup()), List.of())));
            }
        }
        assertTrue(rows.size() >= 40, "expressible rows: " + rows.size());
        assertTrue(share >= 0.75, "share within ±25 %: " + share);
        assertEquals(documentedOutliers(), outliers, "memory-outliers.md must list exactly the rows outside ±25 %");
    }

    /** What the row's metric saw: PyTorch's counters never include the CUDA context; live-tensor counters not the slack. */
    static long comparable(MemoryEstimate e, String metric) {
        Phase phase = metric.startsWith("load-") ? Phase.LOAD : e.peakPhase();
        long bytes = e.total(phase);
        String kind = metric.startsWith("load-") ? metric.substring(5) : metric;
        if (!kind.equals("smi") && !kind.equals("boundary")) {
            bytes -= e.term("cuda_context").in(phase);
        }
        if (kind.equals("active") || kind.equals("allocated")) {
            bytes -= e.term("allocator_slack").in(phase);
        }
        return bytes;
    }

    private static String describe(Row row) {
        TrainingSetup s = row.setup();
        String adapter = s.adapter() instanceof AdapterSpec.Lora l ? (l.quantized() ? "qlora" : "lora") + " r" + l.r() : "full";
        return String.format(Locale.ROOT, "%s %s mb%d×%d %s %d×%s %s", s.modelName(), adapter, s.microBatch(), s.sequenceLength(),
                s.gradientCheckpointing() ? "ckpt" : "no-ckpt", s.ranks(), s.sharding().name().toLowerCase(Locale.ROOT), row.metric());
    }

    static List<Row> rows() throws IOException {
        List<Row> rows = new ArrayList<>();
        for (String line : lines("/memory-measured-setups.tsv")) {
            if (line.isBlank() || line.startsWith("#")) {
                continue;
            }
            String[] f = line.split("\t", -1);
            ModelConfig model = KnownModels.lookup(f[1]).orElseThrow(() -> new IllegalStateException("unknown model " + f[1]));
            int gpus = Integer.parseInt(f[8]);
            Sharding sharding = switch (f[9]) {
                case "single" -> Sharding.SINGLE;
                case "ddp" -> Sharding.DDP;
                case "fsdp" -> Sharding.FSDP_FULL_SHARD;
                case "fsdp_offload" -> Sharding.FSDP_OFFLOAD;
                default -> throw new IllegalStateException(f[9]);
            };
            Kernels kernels = new Kernels(Kernels.Layers.valueOf(f[10].toUpperCase(Locale.ROOT)),
                    switch (f[11]) {
                        case "full" -> Kernels.Loss.FULL;
                        case "upcast" -> Kernels.Loss.UPCAST_FP32;
                        case "chunked" -> Kernels.Loss.CHUNKED;
                        default -> throw new IllegalStateException(f[11]);
                    });
            TrainingSetup setup = new TrainingSetup(f[1], model, adapter(f[2]), PrecisionRegime.valueOf(f[3].toUpperCase(Locale.ROOT)),
                    f[4].equals("adamw") ? Optimizer.ADAMW_TORCH : Optimizer.byName(f[4]), Integer.parseInt(f[6]), 1, Integer.parseInt(f[5]),
                    f[7].equals("on"), new Recipe.Objective.Sft(), sharding, Devices.gpus(gpus, 1, 80L << 30), kernels, new ReferenceModel.None());
            rows.add(new Row(f[0], setup, f[12], Double.parseDouble(f[13]), f[14]));
        }
        return rows;
    }

    private static AdapterSpec adapter(String spec) {
        String[] p = spec.split(":");
        if (p[0].equals("full")) {
            return new AdapterSpec.Full();
        }
        int r = Integer.parseInt(p[1]);
        List<String> targets = p[2].equals("all7") ? ALL_LINEAR : Arrays.asList(p[2].split(","));
        AdapterSpec.Nf4 nf4 = p[0].equals("qlora") ? new AdapterSpec.Nf4(64, p[4].equals("dq")) : null;
        return new AdapterSpec.Lora(r, 2.0 * r, Double.parseDouble(p[3]), targets, false, false, nf4);
    }

    /** Row ids listed under "## Outliers" in memory-outliers.md, as "- ID:" bullets. */
    static List<String> documentedOutliers() throws IOException {
        List<String> ids = new ArrayList<>();
        boolean inSection = false;
        for (String line : lines("/memory-outliers.md")) {
            if (line.startsWith("## ")) {
                inSection = line.startsWith("## Outliers");
            } else if (inSection && line.startsWith("- ") && line.contains(":")) {
                ids.add(line.substring(2, line.indexOf(':')).strip());
            }
        }
        return ids;
    }

    private static List<String> lines(String resource) throws IOException {
        try (InputStream in = Objects.requireNonNull(MeasuredMemoryTest.class.getResourceAsStream(resource), resource);
                BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
            return reader.lines().toList();
        }
    }
}
