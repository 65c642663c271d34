package dev.finetune.recipes.model;

import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.LoraTargets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Every weight tensor of a decoder-only model, counted from its {@link ModelConfig} as transformers builds it
 * ({@code num_parameters()}: a tied head once).
 *
 * <p>The memory model needs more than a total: NF4 quantizes only the decoder's linear layers, 8-bit optimizers keep
 * small tensors in 32 bits, LoRA adapts named projections, FSDP gathers one decoder layer at a time, and a mixture of
 * experts stores every expert but runs only a few per token. So the count is kept per tensor, with the name
 * transformers gives the module (or, for stacked experts, the parameter), and every other number is a sum over this
 * list. Layers that differ (Qwen-MoE's dense {@code mlp_only_layers}) form separate groups.
 *
 * @param groups the decoder layers, as groups of identical layers in no particular order
 * @param embedding {@code model.embed_tokens}
 * @param finalNorm {@code model.norm}; {@code null} when it has no weight (OLMo)
 * @param head {@code lm_head}; {@code null} when tied to the embedding
 */
public record ModelParameters(List<LayerGroup> groups, Tensor embedding, Tensor finalNorm, Tensor head) {

    /** What a tensor is, which decides how it is stored and trained. */
    public enum Kind {
        /** A projection of a decoder layer ({@code nn.Linear}): quantized by QLoRA, adaptable by LoRA. */
        LINEAR,
        /**
         * Stacked expert weights, one {@code nn.Parameter} {@code [experts, out, in]}: LoRA reaches them through PEFT's
         * {@code target_parameters}, one rank-r pair per expert.
         */
        EXPERTS,
        /** A MoE router (and Qwen2-MoE's shared-expert gate): tiny, and frozen under LoRA unless named. */
        ROUTER,
        /** RMSNorm scale vectors, including the q/k norms. */
        NORM,
        /** Projection biases. */
        BIAS,
        /** Token embedding: a lookup table, never quantized. */
        EMBEDDING,
        /** Output projection; bitsandbytes leaves it unquantized. */
        HEAD
    }

    /**
     * One weight, {@code copies} times (stacked experts).
     *
     * @param name transformers' name relative to a decoder layer ({@code self_attn.q_proj}) or the model; a module's
     *     name for a weight ({@code .weight} left off), the parameter's own name for {@link Kind#EXPERTS}
     * @param in input features (columns) of a linear; the length of a vector
     * @param out output features (rows) of a linear; 1 for a vector
     * @param module whether {@code name} is an {@code nn.Linear} PEFT's {@code target_modules} can wrap; otherwise LoRA
     *     reaches the weight as a parameter ({@link #peftParameter})
     */
    public record Tensor(String name, Kind kind, long in, long out, int copies, boolean module) {
        public Tensor(String name, Kind kind, long in, long out, int copies) {
            this(name, kind, in, out, copies, kind != Kind.EXPERTS);
        }

        public long numel() {
            return in * out * copies;
        }

        /** The module's own name ({@code q_proj}, {@code gate_up_proj}), which LoRA target lists use. */
        public String shortName() {
            return name.substring(name.lastIndexOf('.') + 1);
        }

        /** Elements of one copy: what a per-tensor rule (8-bit optimizer threshold) sees. */
        public long numelPerCopy() {
            return in * out;
        }

        /** The parameter's own name under its module ({@code q_proj.weight}, {@code q_proj.bias}, {@code gate_up_proj}). */
        public String parameterName() {
            return kind == Kind.EXPERTS || kind == Kind.BIAS ? name : name + ".weight";
        }

        /** The parameter's shape as torch holds it: {@code [out, in]}, {@code [experts, out, in]}, {@code [length]}. */
        public List<Long> shape() {
            return switch (kind) {
                case NORM, BIAS -> List.of(in);
                case EXPERTS -> List.of((long) copies, out, in);
                default -> List.of(out, in);
            };
        }

        /** Whether a linear map LoRA can adapt (a projection, experts, a router, the head). */
        public boolean adaptable() {
            return kind == Kind.LINEAR || kind == Kind.EXPERTS || kind == Kind.ROUTER || kind == Kind.HEAD;
        }

        /** The name PEFT's {@code target_parameters} takes for this weight, or {@code null} when it is a module. */
        public String peftParameter() {
            return module ? null : kind == Kind.EXPERTS ? name : name + ".weight";
        }
    }

    /**
     * Decoder layers holding the same tensors.
     *
     * @param indices the layers' indices, ascending
     * @param routedShare the fraction of each {@link Kind#EXPERTS} tensor a token runs through (top-k / experts)
     */
    public record LayerGroup(List<Tensor> tensors, List<Integer> indices, double routedShare) {
        public LayerGroup {
            tensors = List.copyOf(tensors);
            indices = List.copyOf(indices);
        }

        public int count() {
            return indices.size();
        }

        /** The first layer of the group, whose module names stand for the group's in target matching. */
        public int first() {
            return indices.get(0);
        }

        public long perLayer() {
            return tensors.stream().mapToLong(Tensor::numel).sum();
        }

        /** Parameters one token runs through in one such layer: every expert's share counted once, at top-k. */
        public double activePerLayer() {
            return tensors.stream().mapToDouble(t -> t.kind() == Kind.EXPERTS ? t.numel() * routedShare : t.numel()).sum();
        }
    }

    /** The tensor list of a config, layer group by layer group. */
    public static ModelParameters of(ModelConfig c) {
        Map<Boolean, List<Integer>> bySparsity = new LinkedHashMap<>();
        for (int i = 0; i < c.numHiddenLayers(); i++) {
            bySparsity.computeIfAbsent(c.experts() != null && c.experts().sparse(i), k -> new ArrayList<>()).add(i);
        }
        List<LayerGroup> groups = new ArrayList<>();
        for (Map.Entry<Boolean, List<Integer>> e : bySparsity.entrySet()) {
            double share = c.experts() == null ? 1 : (double) c.experts().perToken() / c.experts().count();
            groups.add(new LayerGroup(LayerTensors.of(c, e.getKey()), e.getValue(), share));
        }
        long h = c.hiddenSize();
        Tensor embedding = new Tensor("model.embed_tokens", Kind.EMBEDDING, h, c.vocabSize(), 1);
        Tensor head = c.tieWordEmbeddings() ? null : new Tensor("lm_head", Kind.HEAD, h, c.vocabSize(), 1);
        Tensor finalNorm = c.family().finalNormWeight() ? new Tensor("model.norm", Kind.NORM, h, 1, 1) : null;
        return new ModelParameters(List.copyOf(groups), embedding, finalNorm, head);
    }

    /**
     * Every parameter as transformers names it in the module tree ({@code model.named_parameters()}), with its shape,
     * in layer order. The checkpoint on disk holds the same names except where transformers converts on load
     * (Mixtral's and Qwen-MoE's per-expert tensors are stacked into {@code mlp.experts.*}).
     */
    public Map<String, List<Long>> namedShapes() {
        Map<String, List<Long>> shapes = new LinkedHashMap<>();
        shapes.put(embedding.parameterName(), embedding.shape());
        for (int i = 0; i < layers(); i++) {
            for (Tensor t : groupOf(i).tensors()) {
                shapes.put("model.layers." + i + "." + t.parameterName(), t.shape());
            }
        }
        if (finalNorm != null) {
            shapes.put(finalNorm.parameterName(), finalNorm.shape());
        }
        if (head != null) {
            shapes.put(head.parameterName(), head.shape());
        }
        return shapes;
    }

    /** The group holding decoder layer {@code index}. */
    public LayerGroup groupOf(int index) {
        return groups.stream().filter(g -> g.indices().contains(index)).findFirst()
                .orElseThrow(() -> new IndexOutOfBoundsException("no decoder layer " + index));
    }

    /** Decoder layers in all. */
    public int layers() {
        return groups.stream().mapToInt(LayerGroup::count).sum();
    }

    /** The largest decoder layer's tensors: what FSDP gathers at most at once. */
    public List<Tensor> layer() {
        return largestGroup().tensors();
    }

    /** Parameters of the largest decoder layer. */
    public long perLayer() {
        return largestGroup().perLayer();
    }

    private LayerGroup largestGroup() {
        LayerGroup largest = groups.get(0);
        for (LayerGroup g : groups) {
            if (g.perLayer() > largest.perLayer()) {
                largest = g;
            }
        }
        return largest;
    }

    public long headParams() {
        return head == null ? 0 : head.numel();
    }

    /** Parameters in all decoder layers. */
    public long decoder() {
        return groups.stream().mapToLong(g -> g.count() * g.perLayer()).sum();
    }

    public long total() {
        return embedding.numel() + decoder() + (finalNorm == null ? 0 : finalNorm.numel()) + headParams();
    }

    /**
     * Parameters one token runs through: all of a dense model; a mixture of experts' routed share of its experts
     * (what FLOPs count, while memory holds {@link #total}).
     */
    public long active() {
        double decoder = groups.stream().mapToDouble(g -> g.count() * g.activePerLayer()).sum();
        return Math.round(embedding.numel() + decoder + (finalNorm == null ? 0 : finalNorm.numel()) + headParams());
    }

    /** Whether some layer holds experts. */
    public boolean mixtureOfExperts() {
        return groups.stream().anyMatch(g -> g.tensors().stream().anyMatch(t -> t.kind() == Kind.EXPERTS));
    }

    /** Parameters in decoder-layer linears over all layers: what NF4 quantizes. */
    public long quantizable() {
        return groups.stream().mapToLong(g -> g.count() * g.tensors().stream()
                .filter(t -> t.kind() == Kind.LINEAR).mapToLong(Tensor::numel).sum()).sum();
    }

    /**
     * Parameters held in tensors smaller than {@code threshold} elements (per copy): bitsandbytes keeps their
     * optimizer state in 32 bits ({@code min_8bit_size}).
     */
    public long inSmallTensors(long threshold) {
        long small = 0;
        for (LayerGroup g : groups) {
            small += g.count() * g.tensors().stream().filter(t -> t.numelPerCopy() < threshold).mapToLong(Tensor::numel).sum();
        }
        for (Tensor t : new Tensor[] {embedding, finalNorm, head}) {
            if (t != null && t.numelPerCopy() < threshold) {
                small += t.numel();
            }
        }
        return small;
    }

    /** The largest single tensor: what a one-tensor-at-a-time save or device-to-host copy stages. */
    public long largestTensor() {
        long max = Math.max(embedding.numel(), headParams());
        for (LayerGroup g : groups) {
            for (Tensor t : g.tensors()) {
                max = Math.max(max, t.numel());
            }
        }
        return max;
    }

    /**
     * The tensors LoRA adapts, each with the number of layers it is adapted in ({@code lm_head}: 1), in layer order.
     * {@code lora_target_linear} means PEFT's {@code all-linear} (every decoder-layer {@code nn.Linear}) plus the
     * stacked experts, which transformers 5 no longer keeps as linears; routers stay frozen unless
     * {@code lora_target_modules} names them, since adapting the routing is a choice, not a default. Named targets
     * follow {@link LoraTargets}' rule on the full names, layer by layer.
     */
    public Map<Tensor, Long> loraTargetLayers(AdapterSpec adapter) {
        Map<Tensor, Long> chosen = new LinkedHashMap<>();
        if (!(adapter instanceof AdapterSpec.Lora lora)) {
            return chosen;
        }
        LoraTargets targets = LoraTargets.of(lora.targetModules());
        for (LayerGroup g : groups) {
            for (Tensor t : g.tensors()) {
                long layers = g.indices().stream().filter(i -> adapted(t, i, lora, targets)).count();
                if (layers > 0) {
                    chosen.merge(t, layers, Long::sum);
                }
            }
        }
        if (head != null && targets.matches(head.name())) {
            chosen.put(head, 1L);
        }
        return chosen;
    }

    /** The one rule of what LoRA adapts in decoder layer {@code index}. */
    private static boolean adapted(Tensor t, int index, AdapterSpec.Lora lora, LoraTargets targets) {
        boolean byDefault = lora.targetAllLinear() && (t.kind() == Kind.LINEAR || t.kind() == Kind.EXPERTS);
        return t.adaptable() && (byDefault || targets.matches(moduleName(t, index)));
    }

    /**
     * What PEFT is told to adapt, by full name so that it adapts exactly what {@link #loraTargetLayers} counts:
     * {@code nn.Linear} modules ({@code target_modules}) and raw weights ({@code target_parameters}: stacked experts,
     * routers that are no linear).
     */
    public record PeftTargets(List<String> modules, List<String> parameters) {}

    public PeftTargets peftTargets(AdapterSpec adapter) {
        List<String> modules = new ArrayList<>();
        List<String> parameters = new ArrayList<>();
        if (adapter instanceof AdapterSpec.Lora lora) {
            LoraTargets targets = LoraTargets.of(lora.targetModules());
            for (int i = 0; i < layers(); i++) {
                for (Tensor t : groupOf(i).tensors()) {
                    if (adapted(t, i, lora, targets)) {
                        if (t.module()) {
                            modules.add(moduleName(t, i));
                        } else {
                            parameters.add("model.layers." + i + "." + t.peftParameter());
                        }
                    }
                }
            }
            if (head != null && targets.matches(head.name())) {
                modules.add(head.name());
            }
        }
        return new PeftTargets(List.copyOf(modules), List.copyOf(parameters));
    }

    /** The distinct tensors LoRA adapts somewhere ({@link #loraTargetLayers}' keys). */
    public List<Tensor> loraTargets(AdapterSpec adapter) {
        return List.copyOf(loraTargetLayers(adapter).keySet());
    }

    /** The Hugging Face module name of a layer tensor in decoder layer {@code index}. */
    static String moduleName(Tensor t, int index) {
        return "model.layers." + index + "." + t.name();
    }

    /**
     * Every linear map a LoRA target can name, as transformers names it: the decoder layers' projections, experts and
     * routers in every layer, and the output head (a module even when its weight is tied).
     */
    public List<String> linearModules() {
        List<String> names = new ArrayList<>();
        for (LayerGroup g : groups) {
            for (int i : g.indices()) {
                for (Tensor t : g.tensors()) {
                    if (t.adaptable()) {
                        names.add(moduleName(t, i));
                    }
                }
            }
        }
        names.add(head != null ? head.name() : "lm_head");
        return names;
    }

    /**
     * Trainable LoRA parameters, as PEFT counts them: {@code r·(in + out)} per adapted linear, per expert for stacked
     * experts (PEFT's {@code ParamWrapper} holds {@code r·experts} rows of A and columns of B), in every layer that has
     * it; {@code lm_head} once.
     */
    public long loraTrainable(AdapterSpec adapter) {
        if (!(adapter instanceof AdapterSpec.Lora lora)) {
            return 0;
        }
        long total = 0;
        for (Map.Entry<Tensor, Long> e : loraTargetLayers(adapter).entrySet()) {
            Tensor t = e.getKey();
            total += e.getValue() * lora.r() * (t.in() + t.out()) * t.copies();
        }
        return total;
    }

    /** Trainable parameters: everything for a full fine-tune, the adapters otherwise. */
    public long trainable(AdapterSpec adapter) {
        return adapter instanceof AdapterSpec.Lora ? loraTrainable(adapter) : total();
    }
}
