package dev.finetune.trainers.train;

import ai.djl.engine.Engine;
import ai.djl.engine.EngineException;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import ai.djl.training.GradientCollector;
import java.util.ArrayList;
import java.util.List;

/**
 * How an {@link Objective} runs the model during a training micro step, and how the loss gets back-propagated.
 *
 * <p>Both kinds reseed the engine's random generator before every layer from the micro step's seed, so a layer
 * draws the same dropout masks whether it runs once ({@link Direct}) or twice ({@link Recomputing}); that makes
 * the two give the same gradients, and makes a resumed run draw what the uninterrupted one drew.
 */
public sealed interface ForwardPass {

    /**
     * {@code inputs → hidden [B, T, D]}, the last layer's output, under the graph as this kind keeps it; the three
     * methods below are what an objective reads from it. Each may be called several times per micro step (DPO:
     * chosen and rejected).
     */
    NDArray hidden(ModelInputs inputs);

    /** The model this pass runs. */
    TrainableModel<?> model();

    /** {@code inputs → logits [B, T, V]}. */
    default NDArray logits(ModelInputs inputs) {
        return model().finalNormAndHead(hidden(inputs));
    }

    /**
     * {@link TokenScores#sft} of {@link #logits}, computed as the model prefers ({@link TrainableModel#sftScores}:
     * with the head inside the loss where it can); targets and weights as there.
     */
    default TokenScores.Sft sft(ModelInputs inputs, long[] targets, float[] weights, NDManager manager) {
        return model().sftScores(hidden(inputs), targets, weights, manager);
    }

    /** {@link TokenScores#perToken} of {@link #logits}, as {@link #sft} is of the SFT loss. */
    default TokenScores.PerToken perToken(ModelInputs inputs, long[] targets, float[] weights, NDManager manager) {
        return model().perTokenScores(hidden(inputs), targets, weights, manager);
    }

    /** Back-propagates {@code loss} into the gradients of the model's trainable arrays. */
    void backward(NDArray loss, GradientCollector collector);

    /**
     * The micro step's seed, a pure function of (recipe seed, step, micro batch): what an objective that samples
     * (GRPO's rollouts) seeds from, so a resumed run samples what the uninterrupted one sampled.
     */
    long seed();

    static ForwardPass of(TrainableModel<?> model, long microStepSeed, boolean recompute) {
        return create(model, microStepSeed, recompute);
    }

    private static <C> ForwardPass create(TrainableModel<C> model, long microStepSeed, boolean recompute) {
        return recompute ? new Recomputing<>(model, microStepSeed) : new Direct<>(model, microStepSeed);
    }

    /** Keeps every intermediate for backward: fastest, most memory. */
    final class Direct<C> implements ForwardPass {
        private final TrainableModel<C> model;
        private final long seed;

        Direct(TrainableModel<C> model, long seed) {
            this.model = model;
            this.seed = seed;
        }

        @Override
        public TrainableModel<C> model() {
            return model;
        }

        @Override
        public NDArray hidden(ModelInputs inputs) {
            C context = model.prepare(inputs);
            NDArray hidden = model.embed(inputs);
            List<? extends TrainableModel.Layer<C>> layers = model.layers();
            for (int i = 0; i < layers.size(); i++) {
                reseed(seed, i);
                // The graph keeps what backward needs on its own; closing the layer's Java wrappers frees the rest
                // (attention scores before the softmax, the masked scores, ...), which DJL would otherwise hold
                // until the micro step ends (peak RSS 3.0 GB -> 1.6 GB at 16 x 512 tokens on stories260K).
                hidden = Recomputing.inOwnScope(layers.get(i), hidden, context);
            }
            return hidden;
        }

        @Override
        public void backward(NDArray loss, GradientCollector collector) {
            collector.backward(loss);
        }

        @Override
        public long seed() {
            return seed;
        }
    }

    /**
     * Activation checkpointing: layers run without a graph, only each layer's input is kept, and the backward walk
     * recomputes one layer at a time under the graph, top to bottom. Each layer runs in its own {@link NDScope}
     * because DJL keeps every intermediate alive until its wrapper is closed, graph or not; without the scopes
     * recomputation would save nothing (docs/engine-facts.md).
     */
    final class Recomputing<C> implements ForwardPass {
        private final TrainableModel<C> model;
        private final long seed;
        private final List<Tape<C>> tapes = new ArrayList<>();

        /** One forward call: its inputs, shared layer state and every layer's input, the last being the output. */
        private record Tape<C>(ModelInputs inputs, C context, List<NDArray> layerInputs) {}

        Recomputing(TrainableModel<C> model, long seed) {
            this.model = model;
            this.seed = seed;
        }

        @Override
        public TrainableModel<C> model() {
            return model;
        }

        /** The layers run without a graph, each one's input taped; the output is where the graph starts. */
        @Override
        public NDArray hidden(ModelInputs inputs) {
            List<? extends TrainableModel.Layer<C>> layers = model.layers();
            List<NDArray> kept = new ArrayList<>(layers.size() + 1);
            C context = model.prepare(inputs);
            boolean gradMode = JniUtils.isGradMode();
            JniUtils.setGradMode(false);
            try {
                NDArray hidden = model.embed(inputs);
                kept.add(hidden);
                for (int i = 0; i < layers.size(); i++) {
                    reseed(seed, i);
                    hidden = inOwnScope(layers.get(i), hidden, context);
                    kept.add(hidden);
                }
            } finally {
                JniUtils.setGradMode(gradMode);
            }
            NDArray last = kept.get(kept.size() - 1);
            last.setRequiresGradient(true);
            tapes.add(new Tape<>(inputs, context, kept));
            return last;
        }

        @Override
        public void backward(NDArray loss, GradientCollector collector) {
            collector.backward(loss);
            List<? extends TrainableModel.Layer<C>> layers = model.layers();
            for (int t = tapes.size() - 1; t >= 0; t--) {
                Tape<C> tape = tapes.get(t);
                NDArray upstream = tape.layerInputs.get(layers.size()).getGradient();
                for (int i = layers.size() - 1; i >= 0; i--) {
                    upstream = recomputeLayer(layers.get(i), i, tape, upstream);
                }
                backwardIntoEmbedding(model.embed(tape.inputs), upstream);
            }
            tapes.clear();
        }

        @Override
        public long seed() {
            return seed;
        }

        /**
         * Finishes the walk in the embedding, unless it is frozen (LoRA). Only the engine knows which: DJL's
         * {@code requiresGrad} answers false for every non-leaf, trainable or not.
         */
        private static void backwardIntoEmbedding(NDArray embedded, NDArray upstream) {
            try {
                JniUtils.backward((PtNDArray) embedded, (PtNDArray) upstream, false, false);
            } catch (EngineException e) {
                if (!String.valueOf(e.getMessage()).contains("does not require grad")) {
                    throw e;
                }
            }
        }

        /** Recomputes layer {@code i} under the graph, back-propagates {@code upstream}, returns its input's gradient. */
        private NDArray recomputeLayer(TrainableModel.Layer<C> layer, int i, Tape<C> tape, NDArray upstream) {
            NDArray input = tape.layerInputs.get(i);
            input.setRequiresGradient(true);
            NDArray inputGradient;
            try (NDScope scope = new NDScope()) {
                reseed(seed, i);
                NDArray output = layer.forward(input, tape.context);
                JniUtils.backward((PtNDArray) output, (PtNDArray) upstream, false, false);
                inputGradient = input.getGradient();
                NDScope.unregister(inputGradient);
            }
            NDScope.register(inputGradient);
            return inputGradient;
        }

        private static <C> NDArray inOwnScope(TrainableModel.Layer<C> layer, NDArray hidden, C context) {
            NDArray output;
            try (NDScope scope = new NDScope()) {
                output = layer.forward(hidden, context);
                NDScope.unregister(output);
            }
            NDScope.register(output);
            return output;
        }
    }

    private static void reseed(long microStepSeed, int layer) {
        Engine.getInstance().setRandomSeed(Seeds.derive(microStepSeed, layer));
    }
}
