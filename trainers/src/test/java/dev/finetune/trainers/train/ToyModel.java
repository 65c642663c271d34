package dev.finetune.trainers.train;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.Scalars;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * A tiny residual network with the real model's shape of contract, built from real engine ops: embedding, per-layer
 * RMS norm → linear (with bias) → SiLU → dropout → linear, a final norm and an untied head. Small enough that a
 * training step takes milliseconds, so loop tests can run many steps in child processes. It mixes no information
 * across positions, which the accumulation test relies on (padding never changes other tokens' outputs).
 */
final class ToyModel implements TrainableModel<ModelInputs> {
    private final Scalars constants;
    private final double dropout;
    private final NDArray embedding;
    private final NDArray finalNorm;
    private final NDArray head;
    private final List<Layer<ModelInputs>> layers = new ArrayList<>();
    private final List<NamedArray> trainable = new ArrayList<>();
    private boolean training = true;

    /**
     * @param trainEmbedding false mimics LoRA: the bottom of the network is frozen, so checkpointing must not
     *     back-propagate into the embedding
     */
    ToyModel(NDManager manager, int vocab, int width, int depth, double dropout, boolean trainEmbedding, long seed) {
        this.constants = new Scalars(manager);
        this.dropout = dropout;
        Random random = new Random(seed);
        embedding = parameter(manager, "model.embed_tokens.weight", random, 0.5, trainEmbedding, vocab, width);
        for (int i = 0; i < depth; i++) {
            String prefix = "model.layers." + i + ".";
            NDArray norm = ones(manager, prefix + "input_layernorm.weight", width);
            NDArray up = parameter(manager, prefix + "mlp.up_proj.weight", random, 0.4, true, 2 * width, width);
            NDArray upBias = parameter(manager, prefix + "mlp.up_proj.bias", random, 0.1, true, 2 * width);
            NDArray down = parameter(manager, prefix + "mlp.down_proj.weight", random, 0.4, true, width, 2 * width);
            layers.add((hidden, inputs) -> {
                NDArray inner = JniUtils.linear((PtNDArray) rmsNorm(hidden, norm), (PtNDArray) up, (PtNDArray) upBias);
                NDArray activated = JniUtils.dropout((PtNDArray) inner.mul(inner.getNDArrayInternal().sigmoid()),
                        this.dropout, training);
                return hidden.add(JniUtils.linear((PtNDArray) activated, (PtNDArray) down, null));
            });
        }
        finalNorm = ones(manager, "model.norm.weight", width);
        head = parameter(manager, "lm_head.weight", random, 0.5, true, vocab, width);
    }

    private NDArray parameter(NDManager manager, String name, Random random, double scale, boolean train, long... dims) {
        Shape shape = new Shape(dims);
        float[] values = new float[(int) shape.size()];
        for (int i = 0; i < values.length; i++) {
            values[i] = (float) (random.nextGaussian() * scale);
        }
        return register(name, manager.create(values, shape), train);
    }

    private NDArray ones(NDManager manager, String name, long width) {
        return register(name, manager.ones(new Shape(width)), true);
    }

    private NDArray register(String name, NDArray fromJava, boolean train) {
        // torch-owned copy: the Java buffer behind create(float[]) must not back an array we update in place
        NDArray owned = fromJava.duplicate();
        fromJava.close();
        if (train) {
            owned.setRequiresGradient(true);
            trainable.add(new NamedArray(name, owned));
        }
        return owned;
    }

    private NDArray rmsNorm(NDArray x, NDArray gain) {
        NDArray meanSquare = x.square().mean(new int[] {-1}, true);
        return x.mul(meanSquare.add(constants.of(1e-6f)).pow(constants.of(-0.5f))).mul(gain);
    }

    @Override
    public List<NamedArray> trainable() {
        return trainable;
    }

    @Override
    public void setTraining(boolean training) {
        this.training = training;
    }

    /** The toy's layers need nothing shared: each position is computed on its own. */
    @Override
    public ModelInputs prepare(ModelInputs inputs) {
        return inputs;
    }

    @Override
    public NDArray embed(ModelInputs inputs) {
        NDArray e = JniUtils.embedding((PtNDArray) inputs.inputIds(), (PtNDArray) embedding, false);
        return e;
    }

    @Override
    public List<? extends Layer<ModelInputs>> layers() {
        return layers;
    }

    @Override
    public NDArray finalNormAndHead(NDArray hidden) {
        return JniUtils.linear((PtNDArray) rmsNorm(hidden, finalNorm), (PtNDArray) head, null);
    }
}
