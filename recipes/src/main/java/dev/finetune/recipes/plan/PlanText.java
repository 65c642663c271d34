package dev.finetune.recipes.plan;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.model.ModelParameters;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;

/** The plan as an aligned text table: GiB per device with one decimal, one column per phase. */
public final class PlanText {

    private PlanText() {}

    public static String render(MemoryPlan plan) {
        MemoryEstimate e = plan.estimate();
        TrainingSetup s = e.setup();
        ModelParameters p = s.model().parameters();
        StringBuilder out = new StringBuilder();
        out.append("model      ").append(s.modelName()).append('\n');
        out.append("           ").append(Bytes.count(p.total())).append(" params: embedding ").append(Bytes.count(p.embedding().numel()))
                .append(", ").append(p.layers()).append(" layers × ").append(Bytes.count(p.perLayer()))
                .append(p.head() == null ? ", head tied" : ", head " + Bytes.count(p.headParams())).append('\n');
        if (p.mixtureOfExperts()) {
            out.append("           ").append(s.model().numLocalExperts()).append(" experts, ").append(s.model().numExpertsPerToken())
                    .append(" per token: ").append(Bytes.count(p.active()))
                    .append(" params active per token (FLOPs), all ").append(Bytes.count(p.total())).append(" in memory\n");
        }
        if (s.model().slidingWindow() != null) {
            out.append("           sliding-window attention over ").append(s.model().slidingWindow().size()).append(" keys in ")
                    .append(s.model().slidingWindow().slidingLayers()).append(" of ").append(p.layers()).append(" layers\n");
        }
        out.append("training   ").append(adapter(s, p)).append(", ").append(s.objectiveLabel()).append('\n');
        out.append("precision  ").append(s.precision().label()).append("; ").append(s.optimizer().label()).append('\n');
        out.append("batch      micro ").append(s.microBatch()).append(" × ").append(s.ranks()).append(s.ranks() == 1 ? " rank" : " ranks")
                .append(" × accumulation ").append(s.gradientAccumulation()).append(" = global ").append(s.globalBatch())
                .append("; ").append((long) s.sequencesPerMicroBatch() * s.trainedSequenceLength()).append(" tokens per micro step\n");
        out.append("kernels    ").append(s.kernels().layers().label()).append(", ").append(s.kernels().attention().label())
                .append(", ").append(s.kernels().loss().label())
                .append(", gradient checkpointing ").append(s.gradientCheckpointing() ? "on" : "off").append('\n');
        out.append("devices    ").append(s.hardware().label()).append(", ").append(s.sharding().label()).append("\n\n");

        List<Phase> phases = e.phases();
        int nameWidth = "GiB per device".length();
        for (Term t : e.terms()) {
            nameWidth = Math.max(nameWidth, t.name().length());
        }
        String nameFormat = "%-" + nameWidth + "s";
        out.append(String.format(Locale.ROOT, nameFormat, "GiB per device"));
        for (Phase ph : phases) {
            out.append(String.format(Locale.ROOT, " %8s", ph == e.peakPhase() ? "*" + ph.label() : ph.label()));
        }
        out.append("  how\n");
        for (Term t : e.terms()) {
            out.append(String.format(Locale.ROOT, nameFormat, t.name()));
            for (Phase ph : phases) {
                out.append(String.format(Locale.ROOT, " %8s", t.bytes().containsKey(ph) ? Bytes.gib(t.in(ph)) : "-"));
            }
            out.append("  ").append(t.how()).append('\n');
        }
        out.append(String.format(Locale.ROOT, nameFormat, "total"));
        for (Phase ph : phases) {
            out.append(String.format(Locale.ROOT, " %8s", Bytes.gib(e.total(ph))));
        }
        out.append("\n\n");
        out.append("peak       ").append(Bytes.gib(e.peakBytes())).append(" GiB per device in ").append(e.peakPhase().label())
                .append(" (capacity ").append(Bytes.gib(e.capacityBytes())).append(" GiB)\n");
        if (e.fits()) {
            out.append("verdict    fits, ").append(Bytes.gib(e.headroomBytes())).append(" GiB to spare\n");
        } else {
            out.append("verdict    does not fit: ").append(Bytes.gib(-e.headroomBytes())).append(" GiB over\n");
            if (plan.remedies().isEmpty()) {
                out.append("           no single change or combination we know of makes it fit on this hardware\n");
            } else {
                out.append("\nchanges that make it fit, cheapest first:\n");
                int i = 1;
                for (Remedy r : plan.remedies()) {
                    out.append(String.format(Locale.ROOT, "  %d. %s → peak %s GiB%s (%s)%n", i++, r.change(),
                            Bytes.gib(r.result().peakBytes()), r.result().fits() ? "" : ", still over", r.cost()));
                }
            }
        }
        return out.toString();
    }

    private static String adapter(TrainingSetup s, ModelParameters p) {
        long trainable = p.trainable(s.adapter());
        if (s.adapter() instanceof AdapterSpec.Lora l) {
            List<ModelParameters.Tensor> targets = p.loraTargets(s.adapter());
            long perLayer = targets.stream().filter(t -> t.kind() != ModelParameters.Kind.HEAD).count();
            String names = targets.stream().map(ModelParameters.Tensor::shortName).distinct().collect(Collectors.joining(", "));
            return (l.quantized() ? "QLoRA" : "LoRA") + " r=" + l.r() + " on " + names + " (" + perLayer + " per layer"
                    + (perLayer < targets.size() ? " + lm_head" : "") + "), " + Bytes.count(trainable) + " trainable ("
                    + String.format(Locale.ROOT, "%.2f", 100.0 * trainable / p.total()) + " %)";
        }
        return "full fine-tune, " + Bytes.count(trainable) + " trainable";
    }
}
