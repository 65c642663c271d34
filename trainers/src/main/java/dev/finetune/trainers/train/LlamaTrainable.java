package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.NamedArray;
import dev.finetune.trainers.model.DecoderLayer;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.RotaryEmbedding;
import java.util.ArrayList;
import java.util.List;

/**
 * The Llama-family model as the training loop sees it: rotary angles and the attention mask are built once per
 * forward pass and shared by every layer, and kept for the recomputation when layers are checkpointed.
 */
public final class LlamaTrainable implements TrainableModel<LlamaTrainable.Shared> {

    /**
     * What all decoder layers of one forward pass read besides the hidden state. {@code causal}: the mask is the
     * plain causal one (one segment per row), so attention may skip the masked blocks instead of reading the mask.
     */
    public record Shared(RotaryEmbedding.Angles angles, NDArray mask, boolean causal) {}

    private final LlamaModel model;
    private final List<Layer<Shared>> layers = new ArrayList<>();

    public LlamaTrainable(LlamaModel model) {
        this.model = model;
        for (DecoderLayer layer : model.layers()) {
            layers.add((hidden, shared) -> layer.forward(hidden, shared.angles(), shared.mask(), shared.causal()));
        }
    }

    public LlamaModel model() {
        return model;
    }

    @Override
    public List<NamedArray> trainable() {
        return model.trainable();
    }

    /** The checkpoint's weights but the embedding table (a tied head is the same tensor), plus any adapters. */
    @Override
    public long parameterCount() {
        long base = 0;
        for (java.util.Map.Entry<String, ai.djl.ndarray.types.Shape> e : LlamaModel.expectedShapes(model.config())
                .entrySet()) {
            base += e.getKey().equals("model.embed_tokens.weight") ? 0 : e.getValue().size();
        }
        long adapters = trainable().stream().filter(p -> p.name().contains(".lora_"))
                .mapToLong(p -> p.array().size()).sum();
        return base + adapters;
    }

    /**
     * The base model has no dropout; LoRA dropout belongs to the adapter projections, which take the switch from
     * here once they have one.
     */
    @Override
    public void setTraining(boolean training) {}

    /**
     * Padding (segment 0) is a segment of its own, so real tokens never attend to it. A sliding window shorter than
     * the row makes the mask more than causal, so attention must read it.
     */
    @Override
    public Shared prepare(ModelInputs inputs) {
        return new Shared(model.rotary().at(inputs.positionIds()),
                model.attentionMask(inputs.inputIds(), inputs.segmentIds()), oneSegmentPerRow(inputs.segmentIds())
                        && model.windowCoversAll(inputs.inputIds().getShape().get(1)));
    }

    /** Whether every row is a single segment (no packing, no padding): then the mask is only causal. */
    static boolean oneSegmentPerRow(NDArray segmentIds) {
        if (segmentIds == null) {
            return true;
        }
        long columns = segmentIds.getShape().get(1);
        long[] ids = segmentIds.toLongArray();
        for (int i = 0; i < ids.length; i++) {
            if (ids[i] != ids[(int) (i - i % columns)]) {
                return false;
            }
        }
        return true;
    }

    @Override
    public NDArray embed(ModelInputs inputs) {
        return model.embed(inputs.inputIds());
    }

    @Override
    public List<? extends Layer<Shared>> layers() {
        return layers;
    }

    @Override
    public NDArray finalNormAndHead(NDArray hidden) {
        return model.finalNormAndHead(hidden);
    }

    @Override
    public TokenScores.Sft sftScores(NDArray hidden, long[] targets, float[] weights, NDManager manager) {
        NDArray head = model.plainHeadWeight();
        return head == null ? TokenScores.sft(finalNormAndHead(hidden), targets, weights, manager)
                : TokenScores.sftThroughHead(model.finalNorm(hidden), head, targets, weights, manager);
    }

    @Override
    public TokenScores.PerToken perTokenScores(NDArray hidden, long[] targets, float[] weights, NDManager manager) {
        NDArray head = model.plainHeadWeight();
        return head == null ? TokenScores.perToken(finalNormAndHead(hidden), targets, weights, manager)
                : TokenScores.perTokenThroughHead(model.finalNorm(hidden), head, targets, weights, manager);
    }
}
